// The host side of the plugin ABI: the th_host_api table given to every plugin, and the host objects
// behind its opaque handles (th_error, th_config, th_host_ctx, th_metric).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>
#include <toml++/toml.h>

#include "base/compute_pool.hpp"
#include "metrics/metrics.hpp"

// Collects the messages a plugin reports during one call.
struct th_error {
  std::vector<std::string> messages;
  std::string text() const;  // messages joined with "; "
};

// A plugin's configuration: its manifest defaults merged with the engine's settings.
struct th_config {
  toml::table table;
};

namespace tokenhost {

// The host's side of draft sessions (th_host_api.draft_*, ABI 1.5): the runtime implements it
// (speculation/draft_sessions.hpp), one per engine, and the server gives it to the instances of the engine's
// spec_decode slot. Sessions are numbers; the host API checks that a session is the calling instance's
// before it gets here. Each call returns TH_OK or a status with `why` set.
class DraftSessionHost {
 public:
  virtual ~DraftSessionHost() = default;
  virtual th_status open(const th_draft_open_args& args, uint64_t& session, std::string& why) = 0;
  virtual th_status append(uint64_t session, const int32_t* tokens, uint32_t n, std::string& why) = 0;
  virtual th_status rollback(uint64_t session, uint32_t n, std::string& why) = 0;
  // sessions[k] for args' session k (args.sessions is the plugin's handles).
  virtual th_status run(const std::vector<uint64_t>& sessions, const th_draft_run_args& args, std::string& why) = 0;
  virtual void close(uint64_t session) = 0;
};

// The host's side of messages between KV connectors (th_host_api.peer_send, ABI 1.9): the actors
// implement it (actors/kv_peer_post.hpp), one per process, and the server gives it to the instances of
// every engine's kv_connector stack. Returns TH_OK (the bytes are on their way) or a status with `why`.
class PeerPost {
 public:
  virtual ~PeerPost() = default;
  virtual th_status send(const std::string& from_engine, const std::string& plugin, const std::string& to, std::string bytes,
                         std::string& why) = 0;
  // An empty string with room for n bytes, for peer_send's copy: a delivered message's memory given
  // back with recycle() where there is one. A save moves tens of megabytes as messages of a few; fresh
  // memory for each costs a page fault per 4 KiB (more than the copy on a virtual machine), and the
  // allocator hands a freed run back to the system as soon as the queue of messages drains.
  std::string take(size_t n);
  // A delivered message's bytes, kept (up to kKeepBytes) for the next take().
  void recycle(std::string bytes);
  static constexpr size_t kKeepBytes = size_t(64) << 20;

 private:
  std::mutex mutex_;
  std::vector<std::string> free_;
  size_t kept_ = 0;
};

}  // namespace tokenhost

// A draft session as a plugin holds it.
struct th_draft_session {
  th_host_ctx* ctx;
  uint64_t id;
};

struct th_metric {
  tokenhost::metrics::Family* family;
  th_host_ctx* ctx;
};

// Who an instance is (engine and slot), for log lines and metric labels, and what it allocated.
struct th_host_ctx {
  std::string plugin_id;
  std::string engine;
  std::string slot;
  tokenhost::metrics::Registry* metrics = nullptr;  // NULL: metric_create fails
  std::vector<std::unique_ptr<th_metric>> metric_handles;
  std::mutex alloc_mutex;
  std::map<void*, std::pair<th_device_kind, size_t>> allocations;  // live allocations of the instance
  size_t bytes_allocated = 0;
  // Draft sessions (ABI 1.5): NULL for instances that get none; the sessions the instance has open.
  std::shared_ptr<tokenhost::DraftSessionHost> drafts;
  // The engine's compute partition, NULL for the process-wide pool (parallel_for, compute_threads).
  std::shared_ptr<tokenhost::ComputePool> pool;
  // Where peer_send's messages go (ABI 1.9): NULL for instances that send none (all but kv_connector).
  std::shared_ptr<tokenhost::PeerPost> peers;
  std::map<th_draft_session*, std::unique_ptr<th_draft_session>> draft_sessions;

  ~th_host_ctx();  // frees (and logs) allocations and draft sessions the plugin leaked
};

namespace tokenhost {

// A draft session's handle is no longer valid (its instance closes it on destroy).
void forget_draft_handle(const th_draft_session* handle);

// The table handed to every plugin; static, valid for the whole process.
const th_host_api* host_api();

// Human-readable name of a status code ("TH_ERR_UNSUPPORTED").
std::string status_name(th_status status);

}  // namespace tokenhost
