// Llama-family models from GGUF files: hyperparameters from the metadata, weights used in place from
// the mapped file, the tokenizer's vocabulary. Llama 2/3, TinyLlama, Mistral and the stories models
// (architecture "llama"), Qwen2 ("qwen2": QKV biases, NEOX RoPE), dense or MoE; Qwen2-MoE ("qwen2moe":
// Qwen2's attention, routed experts of expert_feed_forward_length, a shared expert with a sigmoid gate).
// An MoE model of any of them may carry a shared expert (blk.N.ffn_{gate,up,down}_shexp, optionally
// gated by blk.N.ffn_gate_inp_shexp) declared by <arch>.expert_shared_feed_forward_length or
// <arch>.expert_shared_count.
#pragma once

#include <memory>
#include <string>

#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "base/model_weights.hpp"

namespace tokenhost {

struct LoadedModel {
  std::shared_ptr<const ModelWeights> weights;  // its storage keeps the file mapped
  TokenizerSpec tokenizer;
  std::string chat_template;  // tokenizer.chat_template, "" when absent
};

// The tokenizer a GGUF file describes (tokenizer.ggml.*), a model's or a vocabulary-only file's.
// vocab_size bounds the special ids when the file lists no tokens. Throws gguf::Error starting with
// path for a special id outside the vocabulary.
TokenizerSpec read_tokenizer_spec(const gguf::File& file, const std::string& path, int64_t vocab_size);

// Reads path. Throws std::runtime_error naming the file and what is wrong or unsupported (an
// architecture or tensor type by name, a missing tensor, a shape that does not match the metadata).
// The weights are the file's layout, mapped; a backend places them for its device (Backend::place_weights:
// the CPU backend adds packed copies).
LoadedModel load_gguf_model(const std::string& path, const std::string& name);

}  // namespace tokenhost
