#include "plugin/crash_attribution.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <mutex>

namespace tokenhost {
namespace {

thread_local const PluginCallSite* t_site = nullptr;

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

void put(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
  }
}

void on_fatal_signal(int sig) {
  if (const PluginCallSite* s = t_site) {
    put("tokenhost: fatal ");
    put(signal_name(sig));
    put(" inside plugin ");
    put(s->plugin_id);
    put(" ");
    put(s->version);
    put(" (slot ");
    put(s->slot);
    put(", engine ");
    put(*s->engine ? s->engine : "-");
    put(", call ");
    put(s->call);
    put("): the plugin crashed the server\n");
  }
  // The previous disposition (the default, or a sanitizer's handler) takes it from here: a fault
  // happens again on return, abort() raises again, and raise() below covers the rest.
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i)
    if (kSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  raise(sig);
}

}  // namespace

void install_crash_attribution() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
      struct sigaction action {};
      action.sa_handler = on_fatal_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_NODEFER;  // raise() from the handler reaches the restored disposition
      sigaction(kSignals[i], &action, &g_previous[i]);
    }
  });
}

PluginCallScope::PluginCallScope(const PluginCallSite& site) : outer_(t_site) { t_site = &site; }
PluginCallScope::~PluginCallScope() { t_site = outer_; }

}  // namespace tokenhost
