#include "server/engine_supervisor.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "plugin/kind.hpp"
#include "util/steady_clock.hpp"

namespace tokenhost {

RebuildPlan plan_rebuild(const EngineHandle& down, const FaultLedger& ledger) {
  RebuildPlan plan;
  plan.decl = down.decl();
  for (auto it = plan.decl.slots.begin(); it != plan.decl.slots.end();) {
    const std::string slot = it->first;
    const SlotDecl& now = it->second;
    if (!ledger.quarantined(now.plugin, now.manifest.version)) {
      ++it;
      continue;
    }
    const std::string which = now.plugin + " " + now.manifest.version;
    if (auto before = down.previous_slot(slot); before && !ledger.quarantined(before->plugin, before->manifest.version)) {
      plan.changes.push_back(slot + ": " + which + " is quarantined; back to " + before->plugin + " " + before->manifest.version +
                             ", the plugin it held before");
      it->second = *before;
      ++it;
    } else if (std::optional<SlotId> id = slot_named(slot); id && id->info().unloadable) {
      plan.changes.push_back(slot + ": " + which + " is quarantined; the slot is left empty");
      it = plan.decl.slots.erase(it);
    } else {
      plan.blocked = "its " + slot + " plugin " + which + " is quarantined and the slot held no other before it; swap a plugin into " +
                     slot + " (POST /admin/engines/" + down.name() + "/slots/" + slot + ") to repair the engine";
      return plan;
    }
  }
  // A stack's quarantined layers leave it (the layers are optional tiers: the engine serves without them).
  for (auto it = plan.decl.stacks.begin(); it != plan.decl.stacks.end();) {
    auto& layers = it->second;
    for (size_t i = layers.size(); i-- > 0;)
      if (ledger.quarantined(layers[i].plugin, layers[i].manifest.version)) {
        plan.changes.push_back(it->first + " layer " + std::to_string(i) + ": " + layers[i].plugin + " " + layers[i].manifest.version +
                               " is quarantined; the layer is removed");
        layers.erase(layers.begin() + long(i));
      }
    it = layers.empty() ? plan.decl.stacks.erase(it) : std::next(it);
  }
  return plan;
}

EngineSupervisor::EngineSupervisor(std::shared_ptr<EngineTable> engines, FaultLedger& ledger, SupervisionPolicy policy,
                                   Rebuild rebuild, Unroute unroute, metrics::Registry& metrics)
    : engines_(std::move(engines)),
      ledger_(ledger),
      policy_(policy),
      rebuild_(std::move(rebuild)),
      unroute_(std::move(unroute)),
      hangs_(metrics.family(metrics::Type::counter, "tokenhost_engine_hangs_total",
                            "Steps that ran past [server] step_deadline_ms: the engine was taken out of routing, its requests ended",
                            {"engine"})),
      restarts_(metrics.family(metrics::Type::counter, "tokenhost_engine_restarts_total",
                               "Rebuilds of engines that stopped unasked: outcome rebuilt, failed (tried again after a backoff)",
                               {"engine", "outcome"})),
      thread_([this] { run(); }) {}

EngineSupervisor::~EngineSupervisor() { stop(); }

void EngineSupervisor::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<nlohmann::json> EngineSupervisor::recovery(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = recoveries_.find(name);
  if (it == recoveries_.end()) return std::nullopt;
  const Recovery& r = it->second;
  nlohmann::json j = {{"state", r.quarantined ? "quarantined" : "restarting"}, {"attempts", r.attempts}, {"last_error", r.last_error}};
  if (!r.quarantined)
    j["retry_in_ms"] = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(r.next_try - std::chrono::steady_clock::now()).count());
  return j;
}

void EngineSupervisor::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) break;
    lock.unlock();
    look(std::chrono::steady_clock::now());
    lock.lock();
  }
}

std::chrono::milliseconds EngineSupervisor::backoff(const std::string& name, std::chrono::steady_clock::time_point now) {
  auto& stops = stops_[name];
  stops.erase(std::remove_if(stops.begin(), stops.end(), [&](auto t) { return now - t > policy_.recent; }), stops.end());
  stops.push_back(now);
  auto delay = policy_.first_retry;
  for (size_t i = 1; i < stops.size() && delay < policy_.max_retry; ++i) delay *= 2;
  return std::min(delay, std::max(policy_.max_retry, policy_.first_retry));
}

void EngineSupervisor::look(std::chrono::steady_clock::time_point now) {
  std::vector<std::shared_ptr<EngineHandle>> due, hung;
  {
    std::lock_guard lock(mutex_);
    std::map<std::string, Recovery> still;
    const uint64_t now_ns = steady_now_ns();
    const uint64_t deadline_ns = uint64_t(std::chrono::nanoseconds(policy_.step_deadline).count());
    for (const auto& e : engines_->live()) {
      if (const uint64_t since = e->step_since_ns();
          !e->stopped() && e->hung().empty() && since != 0 && now_ns > since && now_ns - since > deadline_ns)
        hung.push_back(e);
      if (!e->stopped() || e->down_reason().empty()) continue;
      auto it = recoveries_.find(e->name());
      if (it == recoveries_.end() || it->second.engine != e.get()) {  // newly down
        Recovery r;
        r.engine = e.get();
        r.last_error = e->down_reason();
        if (auto fault = e->fault()) ledger_.record(*fault, e->name());
        const auto delay = backoff(e->name(), now);
        r.next_try = now + delay;
        spdlog::warn("engine {} is down ({}); rebuilding it in {} ms", e->name(), r.last_error, delay.count());
        e->set_recovery_state("restarting");
        still[e->name()] = std::move(r);
      } else {
        still[e->name()] = std::move(it->second);
      }
      Recovery& r = still[e->name()];
      if (!r.quarantined && now >= r.next_try) due.push_back(e);
    }
    recoveries_ = std::move(still);  // engines repaired or removed meanwhile are forgotten
  }
  for (const auto& e : hung) {
    const std::string why = "a step ran past the step deadline of " + std::to_string(policy_.step_deadline.count()) +
                            " ms ([server] step_deadline_ms): the engine hung in a plugin call or its computation";
    spdlog::error("engine {}: {}; its requests end, it takes no more, and it is rebuilt once the step returns", e->name(), why);
    e->abandon(why);
    unroute_(e, why);
    hangs_.add({e->name()}, 1);
  }
  for (const auto& e : due) {
    RebuildPlan plan = plan_rebuild(*e, ledger_);
    std::string error;
    if (plan.blocked.empty()) {
      for (const auto& c : plan.changes) spdlog::warn("engine {}: rebuilt without a quarantined plugin: {}", e->name(), c);
      error = rebuild_(e, plan.decl);
      restarts_.add({e->name(), error.empty() ? "rebuilt" : "failed"}, 1);
      if (error.empty()) spdlog::info("engine {} rebuilt and serving again", e->name());
      else spdlog::error("engine {}: rebuild failed: {}", e->name(), error);
    } else {
      spdlog::error("engine {} stays down: {}", e->name(), plan.blocked);
    }
    std::lock_guard lock(mutex_);
    auto it = recoveries_.find(e->name());
    if (it == recoveries_.end() || it->second.engine != e.get()) continue;
    if (error.empty() && plan.blocked.empty()) {
      recoveries_.erase(it);
    } else if (!plan.blocked.empty()) {
      e->set_recovery_state("quarantined");
      it->second.quarantined = true;
      it->second.last_error = plan.blocked;
    } else {
      ++it->second.attempts;
      it->second.last_error = error;
      it->second.next_try = std::chrono::steady_clock::now() + backoff(e->name(), std::chrono::steady_clock::now());
    }
  }
}

}  // namespace tokenhost
