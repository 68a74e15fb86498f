// The router actor: picks the engine that serves each request with its router plugin, forwards the
// request there and tells the plugin how it went.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "metrics/metrics.hpp"

namespace tokenhost {

struct RouterInit {
  std::shared_ptr<PluginInstance> router;
  std::vector<RoutedEngine> engines;
  metrics::Registry* metrics = nullptr;
};

router_actor spawn_router(caf::actor_system& sys, RouterInit init);

}  // namespace tokenhost
