// Perplexity as llama-perplexity computes it, so that the numbers compare: the text is tokenized
// once (BOS first when the vocabulary adds one), cut into chunks of n_ctx tokens (the tail that does
// not fill one is left out), each chunk run as a sequence of its own with its first token replaced by
// BOS, and the second half of each chunk scored: the log-probability of token j + 1 given the tokens up
// to j, for j from n_ctx / 2 to n_ctx - 2. PPL = exp(mean negative log-likelihood), its uncertainty
// from the spread of the per-token values.
//
// Against a base (--kl-divergence): the base run's full distribution at every scored position is saved
// (runtime/logit_file.hpp), and a later run compares its own with them: KL(base || this), top-1
// agreement, the change of the scored token's probability, both perplexities.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/generator.hpp"

namespace tokenhost {

class LogitFileWriter;
class LogitFileReader;

struct PerplexityOptions {
  uint32_t n_ctx = 512;  // tokens per chunk (>= 4; at most the model's context)
  int32_t n_chunks = -1;  // chunks at most; -1: every whole chunk of the text
  int32_t bos = -1;       // the vocabulary's BOS when it adds one, else -1 (the chunks keep their first token)
};

// The chunks a text of n_tokens gives: how many, and which rows of each are scored (first to
// first + rows - 1). Throws std::invalid_argument when the text holds fewer than 2 * n_ctx tokens (as
// llama-perplexity refuses) or n_ctx is out of range.
struct ChunkPlan {
  uint32_t n_chunks = 0, first = 0, rows = 0;
};
ChunkPlan plan_chunks(size_t n_tokens, const PerplexityOptions& options);

// A mean with its standard error.
struct Estimate {
  double value = 0, error = 0;
};

struct KlStatistics {
  Estimate ppl_base, ln_ppl_ratio, kld, same_top;  // same_top: a fraction
  double kld_max = 0, kld_p999 = 0, kld_p99 = 0, kld_median = 0;
  double rms_delta_p = 0;  // root mean square of p(token) - p_base(token)
};

struct PerplexityResult {
  size_t n_tokens = 0;         // of the whole text
  uint32_t n_chunks = 0, n_ctx = 0;
  uint64_t scored = 0;          // tokens scored
  Estimate ppl;
  double nll = 0;               // sum of the scored tokens' negative log-likelihoods (nats)
  bool has_kl = false;
  KlStatistics kl;
};

// One scored row: the log-probability of the token after `position` and, when the scorer has them,
// the log-probabilities over the whole vocabulary there (what a KL divergence compares).
using ScoredRow = std::function<void(uint32_t position, double next_logprob, const std::vector<double>* distribution)>;
// Runs a chunk (BOS first when the vocabulary adds one) as a sequence of its own and calls row for each
// position from `first` to the last but one, in order.
using ChunkScorer = std::function<void(const std::vector<int32_t>& chunk, uint32_t first, const ScoredRow& row)>;

// The scorer of an in-process generator: full distributions, from Generator::score.
ChunkScorer generator_scorer(Generator& generator);

// Runs the chunks through scorer. on_chunk(done, of, ppl so far) after each one; base_out, when set,
// receives every scored row's distribution; base_in, when set, is compared with (its tokens and shape
// must be this run's: std::invalid_argument otherwise); both need a scorer that gives distributions.
// Throws what plan_chunks throws.
PerplexityResult run_perplexity(const ChunkScorer& scorer, const std::vector<int32_t>& tokens, uint32_t vocab_size,
                                const PerplexityOptions& options,
                                const std::function<void(uint32_t done, uint32_t of, double ppl)>& on_chunk,
                                LogitFileWriter* base_out = nullptr, LogitFileReader* base_in = nullptr);
inline PerplexityResult run_perplexity(Generator& generator, const std::vector<int32_t>& tokens, uint32_t vocab_size,
                                       const PerplexityOptions& options,
                                       const std::function<void(uint32_t done, uint32_t of, double ppl)>& on_chunk,
                                       LogitFileWriter* base_out = nullptr, LogitFileReader* base_in = nullptr) {
  return run_perplexity(generator_scorer(generator), tokens, vocab_size, options, on_chunk, base_out, base_in);
}

// log(softmax(logits)) in double, over the whole row.
std::vector<double> log_softmax(const std::vector<float>& logits);

}  // namespace tokenhost
