// Circuit breakers, one per engine the router routes to: an engine that keeps failing requests (or
// answers them too late) is taken out of routing for a while, then let back in through a few probe
// requests, and closed again once they succeed. The router asks each candidate's breaker before its
// router plugin chooses (routable) and tells it how each request it sent there ended (record).
//
//   closed ──(failures consecutive failed or slow requests)──> open ──(open_ms)──> half-open
//   half-open ──(probes requests succeed)──> closed;  half-open ──(a probe fails)──> open
//
// A failed request is one its engine ended with an error (not a refusal by a node's admission, not a
// cancel); a slow one succeeded, but its first token came after slow_ms. The policy is the
// manifest's [breakers] table, changed live through the admin API (BreakerBoard::set_policy).
// Thread-safety: the router's thread routes and records; the admin API and /metrics read from others.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tokenhost::metrics {
class Family;
class Registry;
}  // namespace tokenhost::metrics

namespace tokenhost::routing {

struct BreakerPolicy {
  bool enabled = false;    // [breakers] present (or enabled by the admin API)
  uint32_t failures = 5;   // consecutive failed (or slow) requests that open a breaker, 1..1000
  uint32_t slow_ms = 0;    // a first token later than this counts as a failure; 0: latency is not watched
  uint32_t open_ms = 10000;  // how long an open breaker keeps its engine out of routing, 10..3600000
  uint32_t probes = 1;     // requests a half-open breaker lets through, 1..100; all must succeed

  nlohmann::json json() const;
};

// The policy with the keys of `change` applied ({"enabled": true, "failures": 3, ...}); throws
// std::invalid_argument naming the key and its range for an unknown key, a wrong type or a value out
// of range. Where: the change's origin for the message ("[breakers]", "admin request").
BreakerPolicy changed_breaker_policy(BreakerPolicy policy, const nlohmann::json& change, const std::string& where);

enum class BreakerState { closed = 0, open = 1, half_open = 2 };
const char* breaker_state_name(BreakerState s);

class BreakerBoard;

class EngineBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  EngineBreaker(std::string engine, BreakerBoard& board) : engine_(std::move(engine)), board_(board) {}

  // Whether a request may be sent to the engine now: closed, or half-open with a probe to spare. An
  // open breaker whose time is up turns half-open here. The closed case is one atomic load.
  bool routable(Clock::time_point now = Clock::now());
  // A request was sent to it: a half-open breaker counts it as one of its probes.
  void sent();
  // How a request sent to it ended. failed: its engine ended it with an error; ttft_s: its first
  // token's time (slow past slow_ms counts as a failure). cancelled: the client gave up (neither).
  void record(bool failed, std::optional<double> ttft_s, bool cancelled, Clock::time_point now = Clock::now());
  // Back to closed (the policy was turned off or changed).
  void reset();

  BreakerState state() const { return BreakerState(state_.load(std::memory_order_acquire)); }
  // When an open breaker turns half-open (for Retry-After); now when it is not open.
  Clock::time_point reopens_at() const;
  // Its state for the admin API: state, consecutive failures, opened count, last reason, reopen in ms.
  nlohmann::json json(Clock::time_point now = Clock::now()) const;
  const std::string& engine() const { return engine_; }

 private:
  void open(const std::string& why, Clock::time_point now, uint32_t open_ms);  // needs mutex_
  void set_state(BreakerState s);                                              // needs mutex_

  const std::string engine_;
  BreakerBoard& board_;
  std::atomic<int> state_{int(BreakerState::closed)};
  mutable std::mutex mutex_;  // everything below
  uint32_t consecutive_ = 0;  // failed or slow requests in a row (closed)
  uint32_t probes_sent_ = 0, probes_ok_ = 0;  // half-open
  uint64_t opened_ = 0;
  std::string last_reason_;
  Clock::time_point open_until_{};
};

// The breakers of a server's engines, by engine name (a rebuilt or re-joined engine of the same name
// keeps its breaker), and their policy. Counts tokenhost_breaker_state{engine} (0 closed, 1 open,
// 2 half-open) and tokenhost_breaker_opened_total{engine, reason} (failures, slow, probe).
class BreakerBoard {
 public:
  BreakerBoard(BreakerPolicy policy, metrics::Registry* metrics);
  // The breaker of engine `name`, made on first use.
  std::shared_ptr<EngineBreaker> breaker(const std::string& name);
  BreakerPolicy policy() const;
  // Applies a new policy; every breaker closes (its counts start again under the new rules).
  void set_policy(const BreakerPolicy& policy);
  // GET /admin/guards' "breakers": the policy and each engine's breaker that is not closed or has opened.
  nlohmann::json json() const;
  // Whether any breaker is open or half-open: while none is, the router asks no candidate's breaker
  // (a thousand candidates cost no extra memory loads).
  bool any_not_closed() const { return not_closed_.load(std::memory_order_acquire) > 0; }

 private:
  friend class EngineBreaker;
  void note_state(const std::string& engine, BreakerState from, BreakerState to);
  void note_opened(const std::string& engine, const std::string& reason);

  mutable std::mutex mutex_;  // policy_, breakers_
  BreakerPolicy policy_;
  std::map<std::string, std::shared_ptr<EngineBreaker>> breakers_;
  metrics::Family* state_ = nullptr;
  metrics::Family* opened_ = nullptr;
  std::atomic<int> not_closed_{0};  // breakers open or half-open
};

}  // namespace tokenhost::routing
