// How an engine ended, shared between its actor and the server's parts. The engine notes the plugin
// fault that ends it (plugin/plugin_fault.hpp) before it stops; the exit hook the server attaches to
// the actor (server/engine_handle.cpp) notes every end. Thread-safe: written from the actors' threads,
// read from any.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

#include "plugin/plugin_fault.hpp"

namespace tokenhost {

class EngineEnd {
 public:
  // The engine's own account: plugin `fault` broke a rule past which the engine cannot go on (it threw,
  // or returned what the host's checks refuse); the engine fails its requests and stops.
  void note_fault(const PluginFault& fault) {
    std::lock_guard lock(mutex_);
    if (!fault_) fault_ = fault;
  }
  // The actor has ended; `reason` is "" for an ordinary end (retired and done, drained, stopped by the
  // server), else the exit reason as CAF renders it.
  void ended(const std::string& reason) {
    {
      std::lock_guard lock(mutex_);
      if (!reason.empty()) down_reason_ = fault_ ? std::string(fault_->what()) : reason;
    }
    stopped_ = true;
  }

  bool stopped() const { return stopped_.load(); }
  // Why it ended when that was not asked of it (the plugin fault in the plugin's words, else the exit
  // reason): "" while it runs and after an ordinary end.
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
  std::atomic<bool> stopped_{false};
  mutable std::mutex mutex_;
  std::string down_reason_;
  std::optional<PluginFault> fault_;
};

}  // namespace tokenhost
