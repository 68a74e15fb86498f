// The router actor: picks the engine that serves each request with its router plugin, forwards the
// request there and tells the plugin how it went.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "metrics/metrics.hpp"
#include "experiments/experiment_table.hpp"
#include "routing/breaker.hpp"
#include "routing/overload.hpp"

namespace tokenhost {

// A member of a model group as the router offers it (th_route_candidate's cost_per_mtok, quality).
struct RouteMember {
  std::string model;
  double cost = 1.0, quality = 1.0;
};

struct RouterInit {
  std::shared_ptr<PluginInstance> router;
  std::vector<RoutedEngine> engines;
  metrics::Registry* metrics = nullptr;
  // The A/B split, applied before the router plugin: a request for a model with a running experiment
  // goes to its arm's engine. May be NULL.
  std::shared_ptr<experiments::ExperimentTable> experiments;
  // The text of a model's tokens, for the router plugin's feedback (output_text). May be empty: the
  // feedback then carries no text.
  std::function<std::string(const std::string& model, const std::vector<int32_t>& tokens)> detokenize;
  // Model groups by public name: a request for one has the engines of its members as candidates.
  std::map<std::string, std::vector<RouteMember>> groups;
  // Each model's vocabulary size: a cached answer's tokens are checked against it.
  std::map<std::string, uint32_t> vocab_sizes;
  // The guards (routing/breaker.hpp, routing/overload.hpp): each engine's circuit breaker, and
  // degradation when a model's engines are full. May be NULL (none).
  std::shared_ptr<routing::BreakerBoard> breakers;
  std::shared_ptr<routing::OverloadGuard> overload;
};

router_actor spawn_router(caf::actor_system& sys, RouterInit init);

}  // namespace tokenhost
