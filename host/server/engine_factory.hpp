// Builds engines: loads each model's weights once and places them on each device once (shared by the
// engines there), makes every plugin instance of an engine through the registry, its draft sessions,
// and then its worker and scheduler actors. Used at start, by a kvcache swap (a new engine beside the
// old) and by the admin API's engine additions; one admin change at a time calls it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/kv_peer_post.hpp"
#include "actors/messages.hpp"
#include "manifest/deployment.hpp"
#include "metrics/metrics.hpp"
#include "base/compute_pool.hpp"
#include "base/model_weights.hpp"
#include "server/engine_handle.hpp"

namespace tokenhost {

class Tokenizer;
class DraftSessions;
class Generator;

class EngineFactory {
 public:
  // deployment: the models and the catalog, read as they are when each engine is built.
  EngineFactory(caf::actor_system& system, const Deployment& deployment, registry_actor registry, metrics::Registry& metrics)
      : system_(system), deployment_(deployment), registry_(std::move(registry)), metrics_(metrics) {}

  // Makes the plugin instances, worker and engine actor of decl (its model's weights loaded once).
  // Throws PluginError; nothing of it is left running then.
  std::shared_ptr<EngineHandle> build(const EngineDecl& decl, uint64_t kvcache_swap_requested_ns = 0);

  // An instance for slot of engine (NULL: the router); the library is opened through the registry
  // unless given. Throws PluginError.
  std::shared_ptr<PluginInstance> make_instance(const EngineDecl* engine, SlotId slot, const SlotDecl& decl,
                                                std::shared_ptr<PluginLibrary> library = nullptr);
  // The registry's answer for plugin id: its manifest re-read and its library opened, or why not.
  LoadReply load_library(const std::string& id);

  // Loads model's weights (mapped) and tokenizer, once: a head whose workers serve the model needs
  // its tokenizer without an engine of its own.
  void load_model(const std::string& model);
  // The models some engine was built on (their weights are loaded), in name order, and their
  // tokenizers (GGUF models; NULL for synthetic ones).
  std::vector<std::string> loaded_models() const;
  std::shared_ptr<const Tokenizer> tokenizer(const std::string& model) const;
  // What POST /v1/embeddings computes with for model: a Generator over its weights on the CPU, with the
  // attention plugin of the model's first engine and a kvcache.paged pool of its own holding one
  // sequence of the model's context in f32. Throws PluginError when the model has no engine or a
  // plugin cannot be made.
  std::shared_ptr<Generator> make_embedder(const std::string& model);
  // The models' memory, for the admin status: the weights as loaded and the packed copies placed beside them.
  nlohmann::json models_json() const;
  // The compute pool of an engine: its partition's (made when the first engine of it is built, kept
  // for the server's life: an engine rebuilt computes where it did), NULL without one.
  std::shared_ptr<ComputePool> pool_of(const EngineDecl& decl);
  // The pool of [partitions.NAME] partition, made on first use; engine is counted among its engines.
  std::shared_ptr<ComputePool> pool_named(const std::string& partition, const std::string& engine);
  // Where the engines' KV connectors' messages go (th_host_api.peer_send); the cluster adds its routes.
  const std::shared_ptr<KvPeerPost>& peer_post() const { return peer_post_; }
  // The partitions made so far: each one's threads, cores and engines built on it, for the admin status.
  nlohmann::json partitions_json() const;

 private:
  // A model of the deployment as a draft model, placed on a device: loaded (or generated) on first use,
  // from any engine's thread. NULL when the deployment has no such model.
  std::shared_ptr<const ModelWeights> draft_model_weights(const std::string& model, const std::string& device);

  caf::actor_system& system_;
  const Deployment& deployment_;
  registry_actor registry_;
  metrics::Registry& metrics_;
  mutable std::mutex models_mutex_;  // weights_, placed_weights_ and tokenizers_: builds vs status reads
  std::map<std::string, std::shared_ptr<const ModelWeights>> weights_;  // one copy per model, as loaded
  // As each device's backend computes with them, by (model, device): shared by the engines there.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const ModelWeights>> placed_weights_;
  std::map<std::string, std::shared_ptr<const Tokenizer>> tokenizers_;  // gguf models
  std::map<std::string, std::shared_ptr<const PluginVocab>> vocabs_;    // gguf models: th_create_args.vocab
  // Draft sessions (th_host_api.draft_*) by engine: what the instances of its spec_decode slot draft
  // with. Made with the engine, replaced when it is rebuilt.
  std::map<std::string, std::shared_ptr<DraftSessions>> draft_sessions_;
  // Messages between the engines' KV connectors (th_host_api.peer_send): every worker enters it.
  std::shared_ptr<KvPeerPost> peer_post_ = std::make_shared<KvPeerPost>();
  mutable std::mutex pools_mutex_;
  std::map<std::string, std::shared_ptr<ComputePool>> pools_;  // by partition name
  std::map<std::string, std::set<std::string>> partition_engines_;  // engines built on each
  std::mutex draft_weights_mutex_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const ModelWeights>> draft_weights_;
};

}  // namespace tokenhost
