// The worker actor: owns one device's share of an engine (its attention, kvcache and moe plugin
// instances and the model weights) and runs each step the scheduler sends. It is spawned detached
// (its own thread) because a step is long compute that must not block CAF's cooperative scheduler.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/kv_peer_post.hpp"
#include "actors/messages.hpp"
#include "metrics/metrics.hpp"
#include "backends/backend.hpp"
#include "base/compute_pool.hpp"

namespace tokenhost {

struct WorkerInit {
  std::string engine;
  std::shared_ptr<const ModelWeights> weights;  // as backend computes with them (place_weights)
  const Backend* backend = nullptr;             // the engine device's; runs every step
  SlotInstances plugins;  // the slots the worker owns (slot table): attention, kvcache, moe (MoE models only), kv_connector (a stack)
  metrics::Registry* metrics = nullptr;
  // The engine's compute partition: its steps compute there; NULL: the process-wide pool.
  std::shared_ptr<ComputePool> pool;
  // An MoE engine's expert parallelism (plugin/expert_partitions.hpp): its expert partitions' pools and
  // names, the expert slots on each and the steps between rebalance() calls (0: never); no pools: its
  // experts compute on pool.
  std::vector<std::shared_ptr<ComputePool>> expert_pools;
  std::vector<std::string> expert_partition_names;
  uint32_t expert_slots = 0, rebalance_steps = 0;
  // The model's identity (model_identity(), actors/kv_connectors.hpp): part of every KV connector key.
  uint64_t model_identity = 0;
  // Where the engine's name leads messages between KV connectors (th_host_api.peer_send): the worker
  // enters itself there while it runs. NULL: no connector of another engine reaches this one.
  std::shared_ptr<KvPeerPost> post;
  PluginInstance& attention() const { return *plugins.get(slot_of(TH_KIND_ATTENTION)); }
  PluginInstance& kvcache() const { return *plugins.get(slot_of(TH_KIND_KVCACHE)); }
};

worker_actor spawn_worker(caf::actor_system& sys, WorkerInit init);

}  // namespace tokenhost
