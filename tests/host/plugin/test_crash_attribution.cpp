// A plugin that crashes the server is named in its last log line: the crash happens in a child process
// whose stderr the test reads.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "test_server.hpp"

namespace plugin_crash_attribution_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer (-DTOKENHOST_SANITIZE=ON) the host's own SIGSEGV handler is what these tests
// check: ASan must leave that signal to it (its memory checks do not need the handler).
extern "C" const char* __asan_default_options() { return "handle_segv=0"; }
#endif

namespace {

// Runs body in a child whose stderr goes to a pipe; returns what it wrote and its wait status.
template <class F>
std::pair<std::string, int> run_child(F body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    body();
    _exit(3);  // the body was meant to crash
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return {text, status};
}

}  // namespace

TEST_CASE("crash attribution: a plugin that dereferences NULL is named, with its slot, engine and call", "[plugin][crash]") {
  auto [text, status] = run_child([] {
    auto server = make_test_server();
    server->set_slot("main", "scheduler", server->register_plugin(fixture("crash")), {});
    server->gateway().generate(request_for(*server, "crash", 4));
  });
  INFO(text);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGSEGV);  // the process still ends as the fault would have ended it
  REQUIRE_THAT(text, Contains("tokenhost: fatal SIGSEGV inside plugin scheduler.crash 1.0.0 (slot scheduler, "
                              "engine main, call schedule): the plugin crashed the server"));
}

TEST_CASE("crash attribution: a crash outside any plugin call names no plugin", "[plugin][crash]") {
  auto [text, status] = run_child([] {
    auto server = make_test_server();  // plugins loaded: the handlers are installed
    raise(SIGSEGV);
  });
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGSEGV);
  REQUIRE_THAT(text, !Contains("inside plugin"));
}

}  // namespace plugin_crash_attribution_tests
