// One batched step of a Llama-family model through the engine's plugins: embeddings, RMSNorm, Q/K/V
// projections (with optional biases), RoPE, keys and values stored through the kvcache plugin's
// layout, attention by the attention plugin, output projection, a SwiGLU feed-forward (or, for MoE
// models, the moe plugin's gating and experts, plus the shared expert on the host's kernels when the
// model has one), final norm, logits.
#pragma once

#include <stdexcept>
#include <vector>

#include "plugin/instance.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/step.hpp"

namespace tokenhost {

// Seconds one step spent inside each plugin's calls (for the per-plugin time metrics).
struct PluginSeconds {
  double attention = 0, kvcache = 0, moe = 0;
};

// The plugins one step runs through; moe is NULL for dense models.
struct StepPlugins {
  PluginInstance* attention = nullptr;
  PluginInstance* kvcache = nullptr;
  PluginInstance* moe = nullptr;
  PluginSeconds* seconds = nullptr;  // when set, time in each plugin is added to it
};

// A TH_ERR_RESOURCE_EXHAUSTED from the kvcache plugin: the scheduler over-committed the cache.
struct KvExhausted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs one step and returns the logits of every marked row (StepItem::marked_rows(): each sampled
// item's last row unless it marks more), [n_marked][vocab], in item order then row order. Throws std::runtime_error naming the plugin and call that
// failed, KvExhausted for a full cache.
std::vector<std::vector<float>> forward_step(const ModelWeights& weights, const StepBatch& batch,
                                             const StepPlugins& plugins);

}  // namespace tokenhost
