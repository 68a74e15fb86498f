// Writing GGUF models of any Llama shape (dense or MoE, with or without a shared expert) with seeded
// random weights in any supported element type, with a working SentencePiece-style tokenizer: for tests,
// benchmarks and the demo.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

struct ModelShape {
  uint32_t dim = 64, n_layers = 2, n_heads = 4, n_kv_heads = 4, ffn_dim = 172, vocab_size = 512;
  uint32_t context_len = 2048;
  uint32_t n_experts = 0, n_experts_used = 0;
  // MoE only: 0 or 1 shared expert (a SwiGLU expert every token runs, added to the routed ones), its
  // width (0: ffn_dim), and whether a sigmoid gate scales its output per token (Qwen2-MoE).
  uint32_t n_shared_experts = 0, shared_ffn_dim = 0;
  bool shared_expert_gate = false;
  bool tied_output = false;  // no output.weight: the embedding is reused
  float rope_theta = 10000.0f;
  std::string architecture = "llama";  // llama, qwen2 (QKV biases, NEOX RoPE), qwen2moe (qwen2 with
                                       // experts and a gated shared expert, which it requires), qwen3
                                       // (per-head query and key RMS norms, NEOX RoPE, no biases) or
                                       // qwen3moe (qwen3 with routed experts, no shared one)
};

struct MakeModelOptions {
  std::string path;
  ModelShape shape;
  th_dtype type = TH_DTYPE_F32;  // every matrix; norms stay f32
  uint64_t seed = 1;
  float scale = 0.02f;           // weights ~ normal(0, scale)
  std::function<void(double fraction)> progress;  // optional, called as tensors are made
};

// Presets by name: "stories260K" (the shape of the real model), "110M", "1.1B"; throws
// std::invalid_argument naming the known presets otherwise.
ModelShape model_shape_preset(const std::string& name);

// Writes the model (atomically: a temporary file renamed into place). Throws on an invalid shape
// (naming the field) or a write failure.
void make_model(const MakeModelOptions& options);

}  // namespace tokenhost
