// Crash attribution: a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) raised while a thread is
// inside a plugin call writes one line naming the plugin, its version, slot, engine and the call to
// stderr, with write(2) only (async-signal-safe), before the process ends as it would have. Plugins
// run in-process: a crash inside one ends the server, and this line says whose it was.
#pragma once

namespace tokenhost {

// Where a thread is: the plugin call it is in, or none. The strings must outlive the call.
struct PluginCallSite {
  const char* plugin_id = "";
  const char* version = "";
  const char* slot = "";
  const char* engine = "";
  const char* call = "";
};

// Installs the handlers once per process (the first plugin load does). Handlers that were installed
// before (a sanitizer's) are restored and run after the line is written.
void install_crash_attribution();

// Marks the calling thread as inside a plugin call for the scope's lifetime (nests: the outer call is
// restored at the end).
class PluginCallScope {
 public:
  explicit PluginCallScope(const PluginCallSite& site);
  ~PluginCallScope();
  PluginCallScope(const PluginCallScope&) = delete;
  PluginCallScope& operator=(const PluginCallScope&) = delete;

 private:
  const PluginCallSite* outer_;
};

}  // namespace tokenhost
