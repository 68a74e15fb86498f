#include "routing/breaker.hpp"

#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "metrics/metrics.hpp"
#include "routing/policy_settings.hpp"

namespace tokenhost::routing {

using Clock = std::chrono::steady_clock;

nlohmann::json BreakerPolicy::json() const {
  return {{"enabled", enabled}, {"failures", failures}, {"slow_ms", slow_ms}, {"open_ms", open_ms}, {"probes", probes}};
}

BreakerPolicy changed_breaker_policy(BreakerPolicy p, const nlohmann::json& change, const std::string& where) {
  const PolicySettings settings(change, "breakers", where, {"enabled", "failures", "slow_ms", "open_ms", "probes"});
  settings.read("enabled", p.enabled);
  settings.read("failures", 1, 1000, p.failures);
  settings.read("slow_ms", 0, 3600000, p.slow_ms);
  settings.read("open_ms", 10, 3600000, p.open_ms);
  settings.read("probes", 1, 100, p.probes);
  return p;
}

const char* breaker_state_name(BreakerState s) {
  switch (s) {
    case BreakerState::closed: return "closed";
    case BreakerState::open: return "open";
    case BreakerState::half_open: return "half_open";
  }
  return "?";
}

bool EngineBreaker::routable(Clock::time_point now) {
  if (state_.load(std::memory_order_acquire) == int(BreakerState::closed)) return true;
  std::lock_guard lock(mutex_);
  const auto s = BreakerState(state_.load(std::memory_order_relaxed));
  if (s == BreakerState::open) {
    if (now < open_until_) return false;
    probes_sent_ = probes_ok_ = 0;
    set_state(BreakerState::half_open);
    spdlog::info("router: engine {}'s circuit breaker is half-open: probe requests go to it", engine_);
  }
  if (BreakerState(state_.load(std::memory_order_relaxed)) == BreakerState::half_open) return probes_sent_ < board_.policy().probes;
  return true;
}

void EngineBreaker::sent() {
  if (state_.load(std::memory_order_acquire) == int(BreakerState::closed)) return;
  std::lock_guard lock(mutex_);
  if (BreakerState(state_.load(std::memory_order_relaxed)) == BreakerState::half_open) ++probes_sent_;
}

void EngineBreaker::record(bool failed, std::optional<double> ttft_s, bool cancelled, Clock::time_point now) {
  const BreakerPolicy policy = board_.policy();
  if (!policy.enabled) return;
  const bool slow = !failed && !cancelled && policy.slow_ms > 0 && ttft_s && *ttft_s * 1000.0 > double(policy.slow_ms);
  std::lock_guard lock(mutex_);
  const auto s = BreakerState(state_.load(std::memory_order_relaxed));
  if (s == BreakerState::open) return;  // sent before it opened: its end changes nothing now
  if (s == BreakerState::half_open) {
    if (cancelled) {
      if (probes_sent_ > 0) --probes_sent_;  // the probe told nothing: another may go
    } else if (failed || slow) {
      open(failed ? "a probe request failed" : "a probe request's first token took longer than " + std::to_string(policy.slow_ms) + " ms",
           now, policy.open_ms);
      board_.note_opened(engine_, "probe");
    } else if (++probes_ok_ >= policy.probes) {
      consecutive_ = 0;
      set_state(BreakerState::closed);
      spdlog::info("router: engine {}'s circuit breaker closed: {} probe request(s) succeeded", engine_, probes_ok_);
    }
    return;
  }
  if (cancelled) return;
  if (!failed && !slow) {
    consecutive_ = 0;
    return;
  }
  if (++consecutive_ < policy.failures) return;
  open(std::to_string(consecutive_) + " request(s) in a row failed or were slow, the last " +
           (slow ? "with its first token after " + std::to_string(policy.slow_ms) + " ms" : std::string("with an error")),
       now, policy.open_ms);
  board_.note_opened(engine_, slow ? "slow" : "failures");
}

void EngineBreaker::open(const std::string& why, Clock::time_point now, uint32_t open_ms) {
  ++opened_;
  last_reason_ = why;
  consecutive_ = 0;
  open_until_ = now + std::chrono::milliseconds(open_ms);
  set_state(BreakerState::open);
  spdlog::warn("router: engine {}'s circuit breaker opened ({}): out of routing for {} ms", engine_, why, open_ms);
}

void EngineBreaker::set_state(BreakerState s) {
  const auto from = BreakerState(state_.exchange(int(s), std::memory_order_acq_rel));
  board_.note_state(engine_, from, s);
}

void EngineBreaker::reset() {
  std::lock_guard lock(mutex_);
  consecutive_ = probes_sent_ = probes_ok_ = 0;
  if (BreakerState(state_.load(std::memory_order_relaxed)) != BreakerState::closed) {
    set_state(BreakerState::closed);
    spdlog::info("router: engine {}'s circuit breaker closed by a policy change", engine_);
  }
}

Clock::time_point EngineBreaker::reopens_at() const {
  std::lock_guard lock(mutex_);
  return BreakerState(state_.load(std::memory_order_relaxed)) == BreakerState::open ? open_until_ : Clock::time_point{};
}

nlohmann::json EngineBreaker::json(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  const auto s = BreakerState(state_.load(std::memory_order_relaxed));
  nlohmann::json j = {{"engine", engine_}, {"state", breaker_state_name(s)}, {"consecutive_failures", consecutive_}, {"opened", opened_}};
  if (!last_reason_.empty()) j["last_reason"] = last_reason_;
  if (s == BreakerState::open)
    j["half_open_in_ms"] = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(open_until_ - now).count());
  if (s == BreakerState::half_open) j["probes"] = {{"sent", probes_sent_}, {"succeeded", probes_ok_}};
  return j;
}

BreakerBoard::BreakerBoard(BreakerPolicy policy, metrics::Registry* metrics) : policy_(policy) {
  if (metrics == nullptr) return;
  state_ = &metrics->family(metrics::Type::gauge, "tokenhost_breaker_state",
                            "Each engine's circuit breaker: 0 closed (routed), 1 open (out of routing), 2 half-open (probes only)",
                            {"engine"});
  opened_ = &metrics->family(metrics::Type::counter, "tokenhost_breaker_opened_total",
                             "Times an engine's circuit breaker opened, by why: failures (consecutive failed requests), slow "
                             "(the last of them over slow_ms to its first token), probe (a half-open probe failed)",
                             {"engine", "reason"});
}

std::shared_ptr<EngineBreaker> BreakerBoard::breaker(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& b = breakers_[name];
  if (!b) {
    b = std::make_shared<EngineBreaker>(name, *this);
    if (state_) state_->set({name}, 0);
  }
  return b;
}

BreakerPolicy BreakerBoard::policy() const {
  std::lock_guard lock(mutex_);
  return policy_;
}

void BreakerBoard::set_policy(const BreakerPolicy& policy) {
  std::vector<std::shared_ptr<EngineBreaker>> all;
  {
    std::lock_guard lock(mutex_);
    policy_ = policy;
    for (const auto& [name, b] : breakers_) all.push_back(b);
  }
  for (const auto& b : all) b->reset();
}

nlohmann::json BreakerBoard::json() const {
  std::vector<std::shared_ptr<EngineBreaker>> all;
  nlohmann::json j;
  {
    std::lock_guard lock(mutex_);
    j["policy"] = policy_.json();
    for (const auto& [name, b] : breakers_) all.push_back(b);
  }
  j["engines"] = nlohmann::json::array();
  const auto now = Clock::now();
  for (const auto& b : all) j["engines"].push_back(b->json(now));
  return j;
}

void BreakerBoard::note_state(const std::string& engine, BreakerState from, BreakerState to) {
  if (from == BreakerState::closed && to != BreakerState::closed) not_closed_.fetch_add(1, std::memory_order_acq_rel);
  if (from != BreakerState::closed && to == BreakerState::closed) not_closed_.fetch_sub(1, std::memory_order_acq_rel);
  if (state_) state_->set({engine}, double(int(to)));
}

void BreakerBoard::note_opened(const std::string& engine, const std::string& reason) {
  if (opened_) opened_->add({engine, reason}, 1);
}

}  // namespace tokenhost::routing
