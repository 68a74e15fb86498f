// The router actor: picks the engine that serves each request with its router plugin, forwards the
// request there and tells the plugin how it went.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "metrics/metrics.hpp"
#include "experiments/experiment_table.hpp"

namespace tokenhost {

struct RouterInit {
  std::shared_ptr<PluginInstance> router;
  std::vector<RoutedEngine> engines;
  metrics::Registry* metrics = nullptr;
  // The A/B split, applied before the router plugin: a request for a model with a running experiment
  // goes to its arm's engine. May be NULL.
  std::shared_ptr<experiments::ExperimentTable> experiments;
};

router_actor spawn_router(caf::actor_system& sys, RouterInit init);

}  // namespace tokenhost
