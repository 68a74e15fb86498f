// A small Llama-shaped transformer with seeded random weights, computed through the engine's plugins:
// RMSNorm, Q/K/V projections, RoPE, keys and values stored through the kvcache plugin's layout,
// attention by the attention plugin, output projection, a SwiGLU feed-forward (or, for MoE shapes,
// the moe plugin's gating and experts), final norm, logits and greedy sampling.
//
// It is how the host runs a deployment before a model file is given: deterministic, so two runs (or
// a run with a plugin swapped midway) must produce the same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "plugin/instance.hpp"

namespace tokenhost {

struct SyntheticWeights {
  ModelSpec spec;
  struct Expert {
    std::vector<float> gate, up, down;  // [ffn][dim], [ffn][dim], [dim][ffn]
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  // [dim]
    std::vector<float> wq, wk, wv, wo;       // [out][in] rows
    std::vector<float> router;               // [n_experts][dim] (MoE only)
    std::vector<Expert> experts;             // one (dense) or n_experts
  };
  std::vector<float> embed;   // [vocab][dim]
  std::vector<float> out_norm;
  std::vector<float> output;  // [vocab][dim]
  std::vector<Layer> layers;
  size_t bytes() const;
};

// Seeded weights of spec's shape, normal(0, 0.02)-like, norms near 1. Same seed, same weights.
std::shared_ptr<const SyntheticWeights> make_synthetic_weights(const ModelSpec& spec, uint64_t seed);

// The plugins one step runs through; moe is NULL for dense models.
struct StepPlugins {
  PluginInstance* attention = nullptr;
  PluginInstance* kvcache = nullptr;
  PluginInstance* moe = nullptr;
};

// Runs one batched step. Throws std::runtime_error naming the plugin and call that failed; a
// TH_ERR_RESOURCE_EXHAUSTED from the kvcache is thrown as KvExhausted.
struct KvExhausted : std::runtime_error {
  using std::runtime_error::runtime_error;
};
StepResult run_synthetic_step(const SyntheticWeights& weights, const StepBatch& batch, const StepPlugins& plugins);

}  // namespace tokenhost
