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
};

struct StepBatch {
  std::vector<StepItem> items;
};

}  // namespace tokenhost
