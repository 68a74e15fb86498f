// One step of an engine as the runtime computes it: which sequences, which of their tokens at which
// positions, and how to sample each one's next token. The engine builds it, its worker runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/sampling.hpp"

namespace tokenhost {

// What an engine keeps of one sequence between steps and lends its worker during a step: the tokens
// so far (prompt and generated, the penalties' history) and the sampler with its random state. The
// engine changes it only while no step holding it is in flight.
struct SequenceContext {
  explicit SequenceContext(const SamplingParams& params) : sampler(params) {}
  std::vector<int32_t> tokens;
  Sampler sampler;
  bool logprobs = false;
};

// One sequence's share of a step: feed `tokens` at positions [start, start + tokens.size()); when
// `sample`, return the next token after the last one.
struct StepItem {
  uint64_t seq_id = 0;
  uint32_t start = 0;
  std::vector<int32_t> tokens;
  bool sample = false;
  std::shared_ptr<SequenceContext> context;  // how to sample; NULL: greedy
  // The rows whose logits the step returns: the last logit_rows of tokens (every draft position of a
  // speculative step, say). 0: the last row when `sample`, none otherwise.
  uint32_t logit_rows = 0;
  uint32_t marked_rows() const { return logit_rows > 0 ? logit_rows : sample ? 1u : 0u; }
};

struct StepBatch {
  std::vector<StepItem> items;
};

}  // namespace tokenhost
