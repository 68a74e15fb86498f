// The weights of a Llama-family model as the forward pass reads them: views into memory owned by
// something else (a model file mapped read-only, or generated synthetic weights), shared by every
// engine that serves the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

#include "base/model_spec.hpp"

namespace tokenhost {

// A row-major matrix [rows][cols] of any supported element type: row r starts row_bytes * r bytes
// after data. A vector (norm weight, bias) is one row.
struct WeightView {
  th_dtype type = TH_DTYPE_F32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  const void* data = nullptr;
  // The same matrix packed once for a matmul kernel set (backends/cpu/matmul.hpp: pack_weight), or null:
  // packed_for is that set (products under any other read data), rows packed_row_bytes apart.
  const void* packed = nullptr;
  const void* packed_for = nullptr;
  size_t packed_row_bytes = 0;
  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes; }
};

// A SwiGLU feed-forward: down(silu(gate x) * up x).
struct ExpertWeights {
  WeightView gate, up, down;  // [ffn][dim], [ffn][dim], [dim][ffn]
  bool empty() const { return gate.empty(); }
};

struct LayerWeights {
  WeightView attn_norm, ffn_norm;  // f32 [dim]
  WeightView wq, wk, wv, wo;
  WeightView bq, bk, bv;           // optional biases (Qwen2), f32
  WeightView q_norm, k_norm;       // optional per-head RMS norms of the queries and keys (Qwen3), f32 [head_dim]
  WeightView router;               // [n_experts][dim], MoE only
  std::vector<ExpertWeights> experts;  // one for dense models
  // MoE only, optional (Qwen2-MoE, DeepSeek): a dense expert of its own width that every token runs,
  // added to the routed experts' output; with shared_expert_gate ([1][dim], Qwen2-MoE) that output is
  // scaled per token by sigmoid(shared_expert_gate . x).
  ExpertWeights shared_expert;
  WeightView shared_expert_gate;
};

struct RopeSettings {
  float theta = 10000.0f;
  float freq_scale = 1.0f;  // linear scaling: positions are multiplied by it
  bool neox = false;        // NEOX layout: rotate halves (i, i + d/2) instead of adjacent pairs
};

struct ModelWeights {
  ModelSpec spec;
  RopeSettings rope;
  float rms_eps = 1e-5f;
  WeightView embed;   // [vocab][dim]
  WeightView out_norm;
  WeightView output;  // [vocab][dim] (the embedding itself when tied)
  std::vector<LayerWeights> layers;
  std::shared_ptr<const void> storage;  // keeps the memory of every view alive
  std::vector<std::shared_ptr<void>> packed_storage;  // and of every packed copy (backends/cpu/weight_packing.hpp)
  size_t bytes = 0;                     // weight bytes, for logs and memory accounting
  size_t packed_bytes = 0;              // of the packed copies
};

// A view of contiguous f32 data.
inline WeightView f32_view(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return WeightView{TH_DTYPE_F32, rows, cols, size_t(cols) * sizeof(float), v.data()};
}

}  // namespace tokenhost
