// How long a swap takes to reach the forward pass: from the admin call that asked for it to the first
// step that runs on the new plugin. Each actor that applies swaps keeps one; it is the figure the
// hot-swap benchmark reports, exported as tokenhost_swap_latency_seconds{engine, slot}.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "metrics/metrics.hpp"
#include "util/steady_clock.hpp"

namespace tokenhost {

class SwapLatency {
 public:
  void bind(metrics::Registry* registry, std::string engine) {
    engine_ = std::move(engine);
    if (registry != nullptr)
      histogram_ = &registry->family(metrics::Type::histogram, "tokenhost_swap_latency_seconds",
                                     "From the admin call that swaps a plugin to the first step on the new one (the router: until it is in place)",
                                     {"engine", "slot"}, {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  }
  // The swap of `slot` asked for at requested_ns (steady clock; 0: unknown) is in place. With work
  // held (idle false) its latency ends at the next step; on an idle engine (or the router) the new
  // plugin is in effect now: time spent waiting for a request is not the swap's.
  void applied(const std::string& slot, uint64_t requested_ns, bool idle = false) {
    if (requested_ns == 0) return;
    if (idle) {
      record(slot, requested_ns, steady_now_ns(), "in effect (no work held)");
    } else {
      pending_.emplace_back(slot, requested_ns);
    }
  }
  // A step starts on the plugins in place now.
  void step_started() {
    if (pending_.empty()) return;
    const uint64_t now = steady_now_ns();
    for (const auto& [slot, requested] : pending_) record(slot, requested, now, "first step on it");
    pending_.clear();
  }
  void record(const std::string& slot, uint64_t requested, uint64_t now, const char* what) {
    last_slot_ = slot;
    last_seconds_ = double(now - requested) * 1e-9;
    if (histogram_) histogram_->observe({engine_, slot}, last_seconds_);
    spdlog::info("engine {}: new {} plugin {} {:.1f} ms after the admin call", engine_, slot, what, last_seconds_ * 1e3);
  }
  // {"slot", "seconds"} of the latest swap that reached a step; null before any.
  nlohmann::json last() const {
    if (last_seconds_ < 0) return nullptr;
    return {{"slot", last_slot_}, {"seconds", last_seconds_}};
  }

 private:
  metrics::Family* histogram_ = nullptr;
  std::string engine_;
  std::vector<std::pair<std::string, uint64_t>> pending_;
  std::string last_slot_;
  double last_seconds_ = -1;
};

}  // namespace tokenhost
