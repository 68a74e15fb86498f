// tokenhost_plugin_seconds_total{engine, slot, plugin}: time spent inside each plugin's calls, declared
// here once for both actors that add to it (the engine for its scheduler, the worker for attention,
// kvcache and moe).
#pragma once

#include "metrics/metrics.hpp"

namespace tokenhost {

inline metrics::Family& plugin_seconds_family(metrics::Registry& registry) {
  return registry.family(metrics::Type::counter, "tokenhost_plugin_seconds_total", "Time spent inside each plugin's calls",
                         {"engine", "slot", "plugin"});
}

}  // namespace tokenhost
