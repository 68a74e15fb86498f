// A library is opened first in a process of its own (`tokenhost vet-plugin`), so that one the host
// refuses (a wrong kind, ABI or version, a crashing constructor) never runs code inside the server.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "plugin/library.hpp"

extern char** environ;

namespace tokenhost {
namespace {

std::mutex g_vetting_mutex;
std::string g_vetting_program;  // "" = load in this process at once

// A vetting run longer than this is killed and the library refused.
constexpr auto kVettingTimeout = std::chrono::seconds(20);
// What is kept of the vetting process's output (its one-line reason).
constexpr size_t kMaxVettingOutput = 16 << 10;

}  // namespace

void PluginLibrary::set_vetting_program(const std::string& program) {
  std::lock_guard lock(g_vetting_mutex);
  g_vetting_program = program;
}

std::string PluginLibrary::vetting_program() {
  std::lock_guard lock(g_vetting_mutex);
  return g_vetting_program;
}

void PluginLibrary::vet_here(const std::string& manifest_file, const std::string& library) {
  PluginLibrary lib;
  lib.manifest_ = read_plugin_manifest(manifest_file);
  load(lib, library);
}

void PluginLibrary::vet_in_child(const PluginManifest& manifest, const std::string& private_path) {
  const std::string where = "plugin " + manifest.id + " (" + manifest.file + ")";
  const std::string program = vetting_program();
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw PluginError(where + ": cannot check the library in a separate process: pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  std::string arg0 = program, arg1 = "vet-plugin", arg2 = manifest.file, arg3 = private_path;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), arg3.data(), nullptr};
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    throw PluginError(where + ": cannot check the library in a separate process (" + program + "): " + std::strerror(spawned));
  }
  // Its output until it closes it (it exits) or the time is up.
  std::string said;
  const auto deadline = std::chrono::steady_clock::now() + kVettingTimeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    if (said.size() < kMaxVettingOutput) said.append(buf, size_t(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (timed_out) throw PluginError(where + ": checking the library in a separate process took more than 20 s; refused");
  if (WIFSIGNALED(status))
    throw PluginError(where + ": the library crashed the separate process that checked it (signal " +
                      std::to_string(WTERMSIG(status)) + ", " + strsignal(WTERMSIG(status)) + "); refused" +
                      (said.empty() ? "" : ": " + said));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // The reason as the check gave it (the same text an in-process load would give).
    const size_t last = said.rfind('\n');
    throw PluginError(said.empty() ? where + ": refused by the separate process that checked it"
                                   : (last == std::string::npos ? said : said.substr(last + 1)));
  }
}

}  // namespace tokenhost
