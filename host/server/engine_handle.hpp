// An engine as the server's parts see it: what it serves, the facts its build measured, and the
// operations the admin API and the gateway ask of it. LocalEngine is an engine of this process (its
// scheduler and worker actors); an engine on another node implements the same interface.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/engine_vitals.hpp"
#include "actors/messages.hpp"
#include "manifest/deployment.hpp"

namespace tokenhost {

// What an engine's build found, fixed for the engine's life.
struct EngineFacts {
  uint64_t kv_positions = 0;  // its KV pool: blocks x block size, as its worker reported at start
  bool prefix_cache = false;  // its kvcache plugin caches prefixes (EngineInit::prefix_cache)
  // What that cache holds, for the router (runtime/prefix_summary.hpp); NULL without one.
  std::shared_ptr<PrefixSummary> prefix_summary;
  // A remote engine's link round trip (cluster/link.hpp LinkHealth::rtt_seconds); NULL for a local one.
  std::shared_ptr<const std::atomic<double>> link_rtt_s;
  uint32_t capacity = 0;    // sequences it runs at once when not its declaration's max_step_seqs (a remote engine's)
  uint32_t window_cap = 0;  // a sliding window's positions per sequence at most (EngineInit::window); 0: none
};

class EngineHandle {
 public:
  EngineHandle(EngineDecl decl, EngineFacts facts) : decl_(std::move(decl)), facts_(std::move(facts)) {}
  virtual ~EngineHandle() = default;
  EngineHandle(const EngineHandle&) = delete;
  EngineHandle& operator=(const EngineHandle&) = delete;

  // Fixed for the engine's life: read from any thread.
  const std::string& name() const { return decl_.name; }
  const std::string& model() const { return decl_.model; }
  const std::string& device() const { return decl_.device; }
  const EngineFacts& facts() const { return facts_; }

  // Its declaration as the admin API last changed it (a copy: slots change while it serves).
  EngineDecl decl() const {
    std::lock_guard lock(mutex_);
    return decl_;
  }
  // The plugin of slot now (after a swap), or of none (nullptr when the slot is empty). What the slot
  // held before is kept as its last good plugin (previous_slot).
  void set_slot_decl(const std::string& slot, const SlotDecl* change) {
    std::lock_guard lock(mutex_);
    if (auto it = decl_.slots.find(slot); it != decl_.slots.end()) previous_[slot] = it->second;
    else previous_.erase(slot);
    if (change != nullptr) decl_.slots[slot] = *change;
    else decl_.slots.erase(slot);
  }
  // The layers of a stacking slot now (after an admin change of one of them).
  void set_stack_decl(const std::string& slot, std::vector<SlotDecl> layers) {
    std::lock_guard lock(mutex_);
    if (layers.empty()) decl_.stacks.erase(slot);
    else decl_.stacks[slot] = std::move(layers);
  }
  // What slot held before the admin API last changed it: the plugin a rebuild falls back to when the
  // slot's plugin is quarantined (server/engine_supervisor.hpp). nullopt: it held nothing, or no change.
  std::optional<SlotDecl> previous_slot(const std::string& slot) const {
    std::lock_guard lock(mutex_);
    auto it = previous_.find(slot);
    return it == previous_.end() ? std::nullopt : std::optional<SlotDecl>(it->second);
  }
  // A rebuilt engine keeps its predecessor's last good plugins (for the slots it did not change).
  void inherit_previous_slots(const EngineHandle& predecessor) {
    std::map<std::string, SlotDecl> earlier;
    {
      std::lock_guard lock(predecessor.mutex_);
      earlier = predecessor.previous_;
    }
    std::lock_guard lock(mutex_);
    for (auto& [slot, d] : earlier) previous_.emplace(slot, std::move(d));
  }

  // Where the router sends its requests and cancels.
  virtual RoutedEngine routed() const = 0;
  // Its state as JSON (the engine's status, blocking up to 10 s); {"error": ...} when it does not answer.
  virtual nlohmann::json status() = 0;
  // Puts swap.instance into swap.slot between two steps (blocking up to 60 s).
  virtual SwapResult swap(SlotSwap swap) = 0;
  // Drops its prefix cache: the pool before and after. Throws std::runtime_error when it does not answer.
  virtual std::pair<KvState, KvState> flush_prefix_cache() = 0;
  // Ends it now: its requests end with an error.
  virtual void stop() = 0;
  // It has ended (retired and done, drained, or stopped).
  virtual bool stopped() const = 0;
  // Why it ended when that was not asked of it (a fault, a kill, its worker gone): "" while it runs
  // and after an ordinary end. Such an engine is down: the router no longer routes to it.
  virtual std::string down_reason() const = 0;
  // When the step under way began (steady nanoseconds); 0 between steps. For the step deadline.
  virtual uint64_t step_since_ns() const = 0;
  // Why its step outlived the deadline ("" when none has): it takes no requests then, and stops once
  // the step returns.
  virtual std::string hung() const = 0;
  // Marks it hung (the supervisor does, with why): it is told to stop, which it does once the call it
  // is in returns (a call that never returns keeps its thread: the README's reliability section).
  virtual void abandon(const std::string& why) = 0;
  // It takes requests: neither stopped nor hung.
  bool serving() const { return !stopped() && hung().empty(); }
  // The plugin fault that ended it (plugin, version, slot, call, message), when that is how it ended.
  virtual std::optional<PluginFault> fault() const = 0;
  // What the server does about it while it is down (server/engine_supervisor.hpp): "restarting",
  // "quarantined", or "" (nothing yet, or it is not down).
  std::string recovery_state() const {
    std::lock_guard lock(mutex_);
    return recovery_state_;
  }
  void set_recovery_state(std::string state) {
    std::lock_guard lock(mutex_);
    recovery_state_ = std::move(state);
  }
  // Why a stopped engine is not serving, for status and health: down_reason(), or "stopped".
  std::string stop_reason() const {
    std::string why = down_reason();
    return why.empty() ? "stopped" : why;
  }

 private:
  mutable std::mutex mutex_;  // decl_'s slots, previous_, recovery_state_
  EngineDecl decl_;
  std::map<std::string, SlotDecl> previous_;  // by slot name
  std::string recovery_state_;
  const EngineFacts facts_;
};

// An engine of this process: a scheduler actor and its worker.
class LocalEngine final : public EngineHandle {
 public:
  // vitals: where the engine actor notes its steps and a plugin fault (EngineInit::vitals); its exit is noted there too.
  LocalEngine(caf::actor_system& system, EngineDecl decl, EngineFacts facts, engine_actor actor, worker_actor worker,
              std::shared_ptr<EngineVitals> vitals);
  RoutedEngine routed() const override;
  nlohmann::json status() override;
  SwapResult swap(SlotSwap swap) override;
  std::pair<KvState, KvState> flush_prefix_cache() override;
  void stop() override;
  bool stopped() const override { return vitals_->stopped(); }
  std::string down_reason() const override;
  std::optional<PluginFault> fault() const override;
  uint64_t step_since_ns() const override { return vitals_->step_since_ns(); }
  std::string hung() const override { return vitals_->hung(); }
  void abandon(const std::string& why) override;
  // Its actors (for the supervision to come and for tests that stop one as a fault would).
  engine_actor actor() const { return actor_; }
  worker_actor worker() const { return worker_; }

 private:
  caf::actor_system& system_;
  engine_actor actor_;
  worker_actor worker_;
  std::shared_ptr<EngineVitals> vitals_;
};

}  // namespace tokenhost
