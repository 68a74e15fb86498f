// `tokenhost bench --sweep NAME=V1,V2,...`: the same load against a server started afresh for each
// value of one manifest key (a dotted path, e.g. engines.main.max_step_seqs) or one serve flag
// (--kv-dtype, --kvcache, --spec, --parallel, ...), on the base manifest --serve names (the embedded
// default without one). Each server runs as a child process (`tokenhost serve`) on ports the system
// picks, and is stopped (SIGTERM, then SIGKILL after 30 s) before the next one starts.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace tokenhost {

struct Sweep {
  std::string name;                 // "--flag" or a dotted manifest key
  std::vector<std::string> values;  // as typed (a key's value is read as TOML: 64, 0.5, true, "text"; a bare word is a string)
};

// "NAME=V1,V2,..." -> Sweep; throws std::invalid_argument naming what is wrong.
Sweep parse_sweep(const std::string& spec);

// The manifest a sweep's value gives (TOML text): the base (a path; "" the embedded default) with the
// flag or key set, listening on ports the system picks, logging at info. Throws std::invalid_argument
// naming the flag or key when it cannot apply.
std::string sweep_manifest(const std::string& base, const Sweep& sweep, const std::string& value);

// A server started for one value: its manifest written to manifest_dir (the base manifest's folder,
// so that its relative paths mean what they meant there; removed when the server stops), `tokenhost
// serve` (this executable) running it, its log in log_dir. The constructor waits for the gateway to
// listen (at most 120 s) and throws std::runtime_error with the log's tail when it does not.
class ChildServer {
 public:
  ChildServer(const std::string& manifest, const std::string& manifest_dir, const std::string& log_dir, const std::string& label);
  ~ChildServer();
  ChildServer(const ChildServer&) = delete;
  ChildServer& operator=(const ChildServer&) = delete;
  const std::string& url() const { return url_; }
  const std::string& log_path() const { return log_; }

 private:
  void stop();
  pid_t pid_ = -1;
  std::string url_, log_, manifest_path_;
};

}  // namespace tokenhost
