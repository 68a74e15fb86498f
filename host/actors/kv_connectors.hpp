// The KV connectors of one engine (th_kv_connector.h), as its worker calls them: an ordered stack of
// tiers. When a request arrives the worker asks each tier which leading blocks of the prompt past its
// kvcache's prefix it holds and loads the longest run from the tier holding it, into blocks the kvcache
// reserved for the sequence (the sequence waits, TH_SEQ_LOADING, until the load completes); after each
// step it saves the prompt blocks the step completed to every tier. Everything a connector returns is
// checked (counts, tickets); a load that fails or is refused leaves the sequence to compute those
// positions, and a sequence freed while its load is out keeps its blocks until the completion comes.
//
// Keys: the namespace is the model's identity (model_identity(): its weights), the KV shape
// (sdk::kv_shape_fingerprint) and the request's cache namespace (API key and cache_salt); a block's key
// is the host's prefix chain (extend_prefix_block_keys). Only sequences of a prefix-caching kvcache
// take part: loaded blocks join its cache through seq_publish, and its seq_truncate gives back what a
// failed load did not fill.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/model_weights.hpp"
#include "base/step.hpp"
#include "metrics/metrics.hpp"
#include "plugin/instance.hpp"

namespace tokenhost {

// 64 bits that tell two models' weights apart: the shape and a sample of every tensor's bytes (the
// embedding's first rows, each layer's attention and first expert matrices, the output norm). Two files
// of the same weights give the same number on every machine; a fine-tune or another quantization
// another. Not a cryptographic hash: it keeps honest models apart, it does not stop a forger.
uint64_t model_identity(const ModelWeights& weights);

// A load that finished (KvConnectors::poll): the sequence now holds `positions` positions of its prompt
// in its kvcache, published to the prefix cache (its lookup's, then the loaded ones); error says why a
// load stopped short.
struct KvLoadDone {
  uint64_t seq_id = 0;
  uint32_t positions = 0;
  std::string error;
};

class KvConnectors {
 public:
  KvConnectors(std::string engine, uint64_t model_identity, metrics::Registry* metrics);

  // Whether the engine has connectors and a kvcache they can serve (prefix caching, seq_truncate).
  bool active(const SlotInstances& plugins) const;

  // After seq_id's lookup found n_cached positions of prompt: loads what a tier holds past them.
  // Returns the positions being loaded (the sequence holds their blocks from now on), 0 when none.
  uint32_t start_load(const SlotInstances& plugins, PluginInstance& kv, uint64_t seq_id, uint64_t cache_ns,
                      const std::vector<int32_t>& prompt, uint32_t n_cached);
  // A relookup (the worker's) gave seq_id n_cached positions: what it saves starts there.
  void relooked(uint64_t seq_id, uint32_t n_cached, uint32_t block_size);
  // After a step published its items: saves the prompt blocks each item completed to every tier.
  void save_step(const SlotInstances& plugins, PluginInstance& kv, const StepBatch& batch);
  // Collects finished transfers; finished loads go back to the engine (their sequences' blocks
  // published, or truncated to what arrived). A sequence freed meanwhile is freed now.
  std::vector<KvLoadDone> poll(const SlotInstances& plugins, PluginInstance& kv);
  // The engine freed seq_id: false when its load is out (cancelled: freed when it completes), true when
  // the caller frees it now.
  bool release(const SlotInstances& plugins, uint64_t seq_id);
  // The sequences whose saves are still out.
  std::vector<uint64_t> saving() const;
  // Loads out, in all and on one layer.
  size_t loading() const { return loads_.size(); }
  size_t loads_on(size_t layer) const;
  // The stack changed at `layer`: +1 a layer was inserted there, -1 the layer there was removed, 0 it
  // was replaced. The transfers and counts of later layers follow them; saves out on a layer that went
  // are forgotten (its instance is gone), and a replaced layer's counts start again.
  void layer_changed(int delta, size_t layer);

  // Per layer: the plugin, its totals (th_kv_connector_stats) and the host's counts.
  nlohmann::json status(const SlotInstances& plugins) const;

 private:
  struct Seq {
    uint64_t cache_ns = 0;
    std::vector<int32_t> prompt;
    std::vector<uint64_t> keys;  // of its prompt's first whole blocks, extended as they are needed
    uint32_t saved_blocks = 0;  // the prompt's leading whole blocks the tiers have (or were given)
  };
  struct Load {
    uint64_t seq_id = 0;
    size_t layer = 0;
    uint32_t first_position = 0, n_blocks = 0;
    uint64_t started_ns = 0;
    bool released = false;  // the engine freed the sequence meanwhile
  };
  struct Save {
    uint64_t seq_id = 0;
    size_t layer = 0;
    uint32_t n_blocks = 0;
    uint64_t started_ns = 0;
  };
  // The host's counts per layer (what /metrics and status show).
  struct Counts {
    uint64_t saved_blocks = 0, saved_bytes = 0, loaded_blocks = 0, loaded_bytes = 0, hits = 0, load_failures = 0, saves_refused = 0;
    uint64_t save_failures = 0;  // saves that completed short (a full or unwritable store): logged, counted
    double load_seconds = 0, save_seconds = 0;
    std::string last_failure;  // the last load that stopped short or save that failed, in the connector's words
  };
  uint64_t namespace_of(uint64_t cache_ns, const th_kv_layout& layout) const;
  Counts& counts(size_t layer);
  void count_metrics(size_t layer, const PluginInstance& p, const char* what, double value);

  std::string engine_;
  uint64_t model_identity_;
  metrics::Registry* metrics_;
  uint64_t next_ticket_ = 1;
  std::map<uint64_t, Seq> seqs_;
  std::map<uint64_t, Load> loads_;  // by ticket
  std::map<uint64_t, Save> saves_;  // by ticket
  std::vector<Counts> counts_;
};

}  // namespace tokenhost
