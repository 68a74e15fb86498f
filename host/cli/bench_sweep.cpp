#include "cli/bench_sweep.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <toml++/toml.h>

#include "cli/serve_flags.hpp"
#include "util/atomic_file.hpp"

extern char** environ;

namespace tokenhost {

namespace {

std::string tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos > 0; ++n) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

}  // namespace

Sweep parse_sweep(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= spec.size())
    throw std::invalid_argument("--sweep " + spec + ": expected NAME=V1,V2,... (a manifest key or a serve flag)");
  Sweep s;
  s.name = spec.substr(0, eq);
  std::string values = spec.substr(eq + 1);
  for (size_t begin = 0; begin <= values.size();) {
    const size_t comma = values.find(',', begin);
    const std::string v = values.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (v.empty()) throw std::invalid_argument("--sweep " + spec + ": an empty value");
    s.values.push_back(v);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (s.name.rfind("--", 0) != 0 && (s.name.front() == '.' || s.name.back() == '.' || s.name.find("..") != std::string::npos))
    throw std::invalid_argument("--sweep " + spec + ": '" + s.name + "' is neither a serve flag (--name) nor a dotted manifest key");
  return s;
}

std::string sweep_manifest(const std::string& base, const Sweep& sweep, const std::string& value) {
  ServeFlags flags;
  if (sweep.name.rfind("--", 0) == 0) {
    CLI::App app;
    add_serve_flags(app, flags);
    try {
      app.parse(std::vector<std::string>{value, sweep.name});  // CLI11 reads a vector from its back
    } catch (const CLI::ParseError& e) {
      throw std::invalid_argument("--sweep " + sweep.name + "=" + value + ": " + e.what());
    }
  }
  std::vector<std::string> notes;
  const std::string text = effective_manifest(base, flags, notes);
  toml::table doc;
  try {
    doc = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument("--sweep: the manifest does not parse: " + std::string(e.description()));
  }
  if (sweep.name.rfind("--", 0) != 0) {
    toml::table* at = &doc;
    std::string path = sweep.name;
    for (size_t dot; (dot = path.find('.')) != std::string::npos; path = path.substr(dot + 1)) {
      const std::string key = path.substr(0, dot);
      if (!(*at)[key]) at->insert(key, toml::table{});
      at = (*at)[key].as_table();
      if (at == nullptr) throw std::invalid_argument("--sweep " + sweep.name + ": '" + key + "' is not a table in the manifest");
    }
    try {
      toml::table parsed = toml::parse("v = " + value);
      at->insert_or_assign(path, *parsed.get("v"));
    } catch (const toml::parse_error&) {
      at->insert_or_assign(path, value);
    }
  }
  if (!doc["server"]) doc.insert("server", toml::table{});
  toml::table& server = *doc["server"].as_table();
  server.insert_or_assign("listen", "127.0.0.1:0");
  server.insert_or_assign("admin_listen", "127.0.0.1:0");
  server.insert_or_assign("log_level", "info");
  std::ostringstream out;
  out << "# tokenhost bench --sweep " << sweep.name << "=" << value << "\n" << doc << "\n";
  return out.str();
}

ChildServer::ChildServer(const std::string& manifest, const std::string& manifest_dir, const std::string& log_dir,
                         const std::string& label) {
  const std::string path = manifest_dir + "/.tokenhost-sweep-" + std::to_string(::getpid()) + "-" + label + ".toml";
  manifest_path_ = path;
  log_ = log_dir + "/" + label + ".log";
  write_file_atomically(path, manifest, 0600);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::string exe = "/proc/self/exe", serve = "serve";
  char* argv[] = {exe.data(), serve.data(), const_cast<char*>(path.c_str()), nullptr};
  const int rc = posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("--sweep: cannot start tokenhost serve: " + std::string(std::strerror(rc)));
  static const std::regex listening("gateway listening on [0-9.]+:([0-9]+)");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch m;
    std::string log;
    try {
      log = read_file(log_);
    } catch (const std::runtime_error&) {  // not opened by the child yet
    }
    if (std::regex_search(log, m, listening)) {
      url_ = "http://127.0.0.1:" + m[1].str();
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      stop();
      throw std::runtime_error("--sweep " + label + ": the server ended before it listened; its log (" + log_ + ") ends:\n" + tail(log, 8));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop();
  throw std::runtime_error("--sweep " + label + ": the server did not listen within 120 s; its log: " + log_);
}

ChildServer::~ChildServer() { stop(); }

void ChildServer::stop() {
  std::error_code ec;
  if (!manifest_path_.empty()) std::filesystem::remove(manifest_path_, ec);
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_ = -1;
}

}  // namespace tokenhost
