// The worker actor: owns one device's share of an engine (its attention, kvcache and moe plugin
// instances and the model weights) and runs each step the scheduler sends. It is spawned detached
// (its own thread) because a step is long compute that must not block CAF's cooperative scheduler.
#pragma once

#include <memory>
#include <string>

#include "actors/messages.hpp"
#include "metrics/metrics.hpp"
#include "backends/backend.hpp"

namespace tokenhost {

struct WorkerInit {
  std::string engine;
  std::shared_ptr<const ModelWeights> weights;  // as backend computes with them (place_weights)
  const Backend* backend = nullptr;             // the engine device's; runs every step
  std::shared_ptr<PluginInstance> attention, kvcache, moe;  // moe NULL for dense models
  metrics::Registry* metrics = nullptr;
};

worker_actor spawn_worker(caf::actor_system& sys, WorkerInit init);

}  // namespace tokenhost
