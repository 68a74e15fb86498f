// What the server watches of an engine, shared between its actor and the server's parts: whether a
// step runs (since when, for the step deadline), the plugin fault that ends it, and how it ended. The
// engine notes its steps and a fault before it stops; the exit hook the server attaches to the actor
// (server/engine_handle.cpp) notes every end; the supervisor (server/engine_supervisor.hpp) marks an
// engine whose step outlives the deadline hung. Thread-safe: written from the actors' threads and the
// supervisor's, read from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "plugin/plugin_fault.hpp"

namespace tokenhost {

class EngineVitals {
 public:
  // A step begins (the scheduler's decision, the drafts, the worker's computation) at steady time
  // now_ns / it is over. The engine calls them from its actor.
  void step_started(uint64_t now_ns) { step_since_ns_ = now_ns; }
  void step_ended() { step_since_ns_ = 0; }
  // When the step under way began (steady nanoseconds); 0 between steps.
  uint64_t step_since_ns() const { return step_since_ns_.load(); }

  // The engine's own account: plugin `fault` broke a rule past which the engine cannot go on (it threw,
  // or returned what the host's checks refuse); the engine fails its requests and stops.
  void note_fault(const PluginFault& fault) {
    std::lock_guard lock(mutex_);
    if (!fault_) fault_ = fault;
  }
  // The supervisor's account: a step outlived the deadline (why). The engine stops once the step returns.
  void note_hung(const std::string& why) {
    std::lock_guard lock(mutex_);
    hung_ = why;
  }
  // The actor has ended; `reason` is "" for an ordinary end (retired and done, drained, stopped by the
  // server), else the exit reason as CAF renders it.
  void ended(const std::string& reason) {
    if (!reason.empty()) {
      const std::string why = account(reason);
      std::lock_guard lock(mutex_);
      down_reason_ = why;
    }
    stopped_ = true;
  }
  // Why it stopped, in the best words there are: the plugin fault it noted, else the hang, else
  // `exit_reason` (as CAF renders it). Readable before ended() has run (the router's down message may
  // come first).
  std::string account(const std::string& exit_reason) const {
    std::lock_guard lock(mutex_);
    return fault_ ? std::string(fault_->what()) : !hung_.empty() ? hung_ : exit_reason;
  }

  bool stopped() const { return stopped_.load(); }
  // Why it was hung ("" when it was not): it takes no requests from then on.
  std::string hung() const {
    std::lock_guard lock(mutex_);
    return hung_;
  }
  // Why it ended when that was not asked of it (the plugin fault in the plugin's words, the hang, else
  // the exit reason): "" while it runs and after an ordinary end.
  std::string down_reason() const {
    std::lock_guard lock(mutex_);
    return down_reason_;
  }
  // The plugin fault that ended it, if that is how it ended.
  std::optional<PluginFault> fault() const {
    std::lock_guard lock(mutex_);
    return fault_;
  }

 private:
  std::atomic<uint64_t> step_since_ns_{0};
  std::atomic<bool> stopped_{false};
  mutable std::mutex mutex_;
  std::string down_reason_, hung_;
  std::optional<PluginFault> fault_;
};

}  // namespace tokenhost
