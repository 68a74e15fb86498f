// Single-sequence generation in process (tokenhost generate, tests): chunked prefill, then one token
// per step, through the same forward pass and plugins the server uses, on the backend of the device the
// kvcache instance was created for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/model_weights.hpp"
#include "base/step.hpp"
#include "plugin/instance.hpp"

namespace tokenhost {

class Backend;  // backends/backend.hpp

struct GenerationStats {
  uint32_t prompt_tokens = 0, generated = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  // Of decode_seconds, the time inside the attention plugin's forward() calls: its share of a step.
  double decode_attention_seconds = 0;
  std::string finish_reason;  // "length", "stop" (end-of-sequence token), "context"
};

class Generator {
 public:
  // moe: the gating and experts plugin, needed by (and only by) a model with experts. Throws
  // std::invalid_argument when no backend drives the kvcache's device.
  Generator(std::shared_ptr<const ModelWeights> weights, std::shared_ptr<PluginInstance> attention,
            std::shared_ptr<PluginInstance> kvcache, uint32_t prefill_chunk = 512,
            std::shared_ptr<PluginInstance> moe = nullptr);
  ~Generator();

  // Picks the next token from the logits of the last position.
  using Sampler = std::function<int32_t(const std::vector<float>& logits)>;
  // Called with each generated token; returning false stops generation.
  using OnToken = std::function<bool(int32_t token)>;

  // Generates up to max_new tokens after prompt, stopping early at eos (when >= 0) or the context's
  // end. The KV cache is released before it returns.
  GenerationStats generate(const std::vector<int32_t>& prompt, uint32_t max_new, int32_t eos, const Sampler& sample,
                           const OnToken& on_token);

  // Runs tokens through the model as one sequence from position 0 (chunked prefill) and hands over
  // the logits of every position from `first` on, in order: on_row(position, logits of that row,
  // which predict the token after it). What perplexity and prompt log-probabilities read. The KV
  // cache is released before it returns. Throws std::invalid_argument for no tokens, more than the
  // context holds, or first past the last position.
  using OnRow = std::function<void(uint32_t position, const std::vector<float>& logits)>;
  void score(const std::vector<int32_t>& tokens, uint32_t first, const OnRow& on_row);

  static int32_t greedy(const std::vector<float>& logits);
  uint32_t vocab_size() const { return weights_->spec.info.vocab_size; }
  // The embedding of tokens as llama-server's mean pooling gives it: the mean over every position of
  // the final hidden state after the output norm, scaled to unit Euclidean length (OpenAI's
  // embeddings are). Computed alone (chunked prefill, the KV cache released before it returns): the
  // same tokens give the same vector whatever else is asked. Throws std::invalid_argument for an empty
  // input or one longer than the context.
  std::vector<float> embed(const std::vector<int32_t>& tokens);

 private:
  struct SequenceLease;
  // Runs tokens as a new sequence `seq` from position 0 in chunks of prefill_chunk: for each chunk,
  // step(batch of the chunk's one item, run) sets the item's rows and calls run() for the step's logits.
  using RunStep = std::function<std::vector<std::vector<float>>()>;
  using ChunkStep = std::function<void(StepBatch& batch, const RunStep& run)>;
  void prefill(uint64_t seq, const std::vector<int32_t>& tokens, const ChunkStep& step);

  std::shared_ptr<const ModelWeights> weights_;
  const Backend* backend_ = nullptr;
  SlotInstances plugins_;  // attention, kvcache and (a model with experts) moe
  uint32_t prefill_chunk_;
  uint64_t next_seq_ = 1;
};

}  // namespace tokenhost
