// One batched step of a Llama-family model through the engine's plugins: embeddings, RMSNorm, Q/K/V
// projections (with optional biases), RoPE, keys and values stored through the kvcache plugin's
// layout, attention by the attention plugin, output projection, a SwiGLU feed-forward (or, for MoE
// models, the moe plugin's gating and experts, plus the shared expert on the host's kernels when the
// model has one), final norm, logits.
#pragma once

#include <vector>

#include "base/model_weights.hpp"
#include "base/step.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {

// The CPU backend's step (cpu_backend.cpp): the logits of every marked row (StepItem::marked_rows():
// each sampled item's last row unless it marks more), [n_marked][vocab], in item then row order.
// Throws std::runtime_error naming the plugin and call that failed, KvExhausted for a full cache.
std::vector<std::vector<float>> forward_step(const ModelWeights& weights, const StepBatch& batch,
                                             const StepPlugins& plugins);

// The kvcache's layout, checked for the CPU runtime to write through: host memory, the model's layers,
// kv heads and head size, a dtype it writes (f32, f16, q8_0) and a readable q8_0 layout. Throws
// std::runtime_error naming the plugin and what does not fit.
const th_kv_layout& cpu_kv_layout(const ModelWeights& weights, PluginInstance& kvcache);

// Backend::shift_keys for the CPU (kv_shift.cpp): the keys of seq_id's positions [begin, end), every
// layer and kv head, rotated by -shift positions in place, in the cache's dtype (q8_0: dequantized,
// rotated, quantized again).
void shift_cached_keys(const ModelWeights& weights, PluginInstance& kvcache, uint64_t seq_id, uint32_t begin, uint32_t end,
                       uint32_t shift);

}  // namespace tokenhost
