// Choosing the next token from logits: greedy, temperature, top-k, top-p, min-p, repetition /
// frequency / presence penalties, a seed, and log-probabilities of the chosen and top-n tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/constraint_source.hpp"
#include "base/step.hpp"

namespace tokenhost {

struct SamplingParams {
  float temperature = 0.0f;        // 0 = greedy
  int32_t top_k = 0;               // 0 = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off: drop tokens below min_p * p(best)
  float repetition_penalty = 1.0f; // 1 = off; llama.cpp's rule: positive logits divided, negative multiplied
  float frequency_penalty = 0.0f;  // subtracted once per earlier occurrence
  float presence_penalty = 0.0f;   // subtracted once if the token occurred
  int32_t penalty_last_n = 64;     // how many recent tokens the penalties look at (-1 = all)
  uint64_t seed = 0;
  uint32_t top_logprobs = 0;       // log-probabilities of this many best tokens
  // Added to the logits of these tokens before anything else (OpenAI's logit_bias: -100 all but bans a
  // token, +100 all but forces it); the logprobs reported are of the biased distribution.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0;                 // of the chosen token, under the model's distribution (after penalties)
  // The entropy (nats) of that distribution (penalties applied, temperature 1): with logprob, the
  // confidence signal a cascade escalates on (th_route_signal).
  float entropy = 0;
  std::vector<TokenLogprob> top;     // best top_logprobs tokens, best first
};

// Throws std::invalid_argument naming the field that is out of range.
void validate(const SamplingParams& params);

// token's log-probability under the model's own distribution over logits (no penalty, bias or
// temperature: what prompt log-probabilities report), with the top_n most likely, best first. entropy
// is left 0.
SampledToken score_token(const std::vector<float>& logits, int32_t token, uint32_t top_n);
// log(sum exp(logit)) over logits, in double: the log of the softmax's denominator.
double log_sum_exp(const std::vector<float>& logits);


// Why q is not a distribution a draft token can be verified against (a token outside the vocabulary, a
// probability not in (0, 1], a sum above 1, the drafted token not listed), or "" when it is. The
// engine falls back to exact match for such a token; the conformance suite fails the proposer.
std::string draft_distribution_problem(const DraftDistribution& q, int32_t token, uint32_t vocab_size);

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // history: the tokens of the sequence so far (prompt and generated), for the penalties.
  SampledToken sample(std::vector<float> logits, const std::vector<int32_t>& history);
  // Speculative sampling of a draft token drawn from q: accepted with probability min(1, p/q), p being
  // this sampler's distribution over logits (every option applied); when rejected, the token returned
  // is drawn from max(0, p - q) normalized. Its token then follows p exactly, whatever q. Greedy: the
  // best token, accepted when it is the draft. q must be a distribution holding the draft (the caller
  // checks).
  SampledToken verify_draft(std::vector<float> logits, const std::vector<int32_t>& history, int32_t draft,
                            const DraftDistribution& q, bool& accepted);
  const SamplingParams& params() const { return params_; }

 private:
  struct Weights;
  Weights weights(const std::vector<float>& logits) const;
  size_t draw(const std::vector<double>& weights, size_t k, double total);
  SampledToken annotate(const std::vector<float>& logits, const Weights& w, int32_t token) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
};

// The logit biases, then the penalties, applied to logits in place (exposed for tests).
void apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& history, const SamplingParams& params);

// What an engine keeps of one sequence between steps and lends its worker during a step: the tokens
// so far (prompt and generated, the penalties' history) and the sampler with its random state. The
// engine changes it only while no step holding it is in flight.
struct SequenceContext {
  explicit SequenceContext(const SamplingParams& params) : sampler(params) {}
  std::vector<int32_t> tokens;
  Sampler sampler;
  bool logprobs = false;
  // Structured output: what the sequence's output is constrained to (NULL: nothing), and where the
  // prompt ends in tokens (what follows is the output the constraint reads).
  std::shared_ptr<const ConstraintSource> constraint;
  size_t prompt_tokens = 0;
};

}  // namespace tokenhost
