// The head's link to one worker: it connects (each attempt bounded in time), says hello, checks the
// worker's name against its certificate and proves its own, then keeps a heartbeat. The server learns
// what happens through the callbacks, on the link's actor thread (they must not block): the worker
// joined with its engines, its engines changed, it left and why. A worker that left is tried again
// every reconnect interval. LinkHealth is what admin status shows of the link.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/messages.hpp"
#include "cluster/node_identity.hpp"
#include "cluster/wire.hpp"

namespace tokenhost::cluster {

// A link's health, written by its actor and read by admin status (thread-safe).
class LinkHealth {
 public:
  void set_state(const std::string& state, const std::string& why = {});
  void beat(double rtt_ms);  // a heartbeat came back after rtt_ms
  // The last heartbeat's round trip in seconds (-1 before the first), read without a lock by the
  // router for every request (th_route_request.candidate_rtt_s); shares this object's life.
  static std::shared_ptr<const std::atomic<double>> rtt_seconds(const std::shared_ptr<LinkHealth>& health) {
    return {health, &health->rtt_s_};
  }
  void count_sent(size_t bytes) { sent_messages_++, sent_bytes_ += bytes; }
  void count_received(size_t bytes) { received_messages_++, received_bytes_ += bytes; }
  std::string state() const;
  nlohmann::json json() const;

 private:
  mutable std::mutex mutex_;
  std::string state_ = "connecting", why_;
  double rtt_ms_ = 0;
  std::atomic<double> rtt_s_{-1};
  int64_t last_beat_ms_ = 0;  // system clock, ms since the epoch; 0: none yet
  uint64_t beats_ = 0, joins_ = 0;
  std::atomic<uint64_t> sent_messages_{0}, sent_bytes_{0}, received_messages_{0}, received_bytes_{0};
};

struct LinkInit {
  std::string node;  // the worker's name, as its certificate must say
  std::string host;
  uint16_t port = 0;
  std::string self_name;  // this head's name
  std::shared_ptr<const NodeIdentity> identity;  // NULL: TLS off (names taken as stated)
  std::chrono::milliseconds heartbeat{1000}, heartbeat_timeout{3000}, connect_timeout{5000}, reconnect{2000};
  std::shared_ptr<LinkHealth> health;
  std::function<void(const std::string& node, const node_actor& actor, const std::vector<EngineInfo>& engines)> joined;
  std::function<void(const std::string& node, const std::vector<EngineInfo>& engines)> engines_changed;
  std::function<void(const std::string& node, const std::string& why)> left;
  // The versions of the node's prefix summaries this head holds, sent with each heartbeat (may be
  // unset: every heartbeat then brings every summary).
  std::function<PrefixVersions(const std::string& node)> held_prefixes;
  // A KV connector's message from an engine of the worker (named ENGINE@NODE) to an engine here: from,
  // plugin, to, bytes. Unset: such messages are dropped.
  std::function<void(const std::string& from, const std::string& plugin, const std::string& to, std::string bytes)> kv_arrived;
};

link_actor spawn_link(caf::actor_system& system, LinkInit init);

}  // namespace tokenhost::cluster
