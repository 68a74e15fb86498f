#include "runtime/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runtime/logit_file.hpp"
#include "runtime/sampling.hpp"

namespace tokenhost {

std::vector<double> log_softmax(const std::vector<float>& logits) {
  const double log_sum = log_sum_exp(logits);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - log_sum;
  return out;
}

namespace {

// Mean and standard error of values summed as sum and sum of squares over n.
Estimate estimate(double sum, double sum2, uint64_t n) {
  Estimate e;
  if (n == 0) return e;
  e.value = sum / double(n);
  const double var = sum2 / double(n) - e.value * e.value;
  e.error = n > 1 && var > 0 ? std::sqrt(var / double(n - 1)) : 0;
  return e;
}

// exp of a mean's estimate, its error carried through (d exp(x) = exp(x) dx).
Estimate exp_of(const Estimate& e) { return {std::exp(e.value), std::exp(e.value) * e.error}; }

double quantile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double at = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (at - double(lo)) * (sorted[hi] - sorted[lo]);
}

struct KlAccumulator {
  double nll_base = 0, nll_base2 = 0, ratio = 0, ratio2 = 0, kld = 0, kld2 = 0, dp2 = 0;
  uint64_t same_top = 0, n = 0;
  std::vector<double> klds;

  void add(std::vector<double> base, const std::vector<double>& q, int32_t token) {
    // The saved row is quantized: normalize it again before it is a distribution.
    double best = *std::max_element(base.begin(), base.end()), sum = 0;
    for (double v : base) sum += std::exp(v - best);
    const double log_sum = best + std::log(sum);
    for (double& v : base) v -= log_sum;
    double kl = 0;
    for (size_t i = 0; i < base.size(); ++i) kl += std::exp(base[i]) * (base[i] - q[i]);
    kl = std::max(kl, 0.0);
    kld += kl;
    kld2 += kl * kl;
    klds.push_back(kl);
    const double nb = -base[size_t(token)], nq = -q[size_t(token)];
    nll_base += nb;
    nll_base2 += nb * nb;
    ratio += nq - nb;
    ratio2 += (nq - nb) * (nq - nb);
    const double dp = std::exp(q[size_t(token)]) - std::exp(base[size_t(token)]);
    dp2 += dp * dp;
    same_top += std::max_element(base.begin(), base.end()) - base.begin() == std::max_element(q.begin(), q.end()) - q.begin();
    ++n;
  }

  KlStatistics finish() {
    KlStatistics s;
    s.ppl_base = exp_of(estimate(nll_base, nll_base2, n));
    s.ln_ppl_ratio = estimate(ratio, ratio2, n);
    s.kld = estimate(kld, kld2, n);
    const double p = n ? double(same_top) / double(n) : 0;
    s.same_top = {p, n > 1 ? std::sqrt(p * (1 - p) / double(n - 1)) : 0};
    s.rms_delta_p = n ? std::sqrt(dp2 / double(n)) : 0;
    std::sort(klds.begin(), klds.end());
    s.kld_max = klds.empty() ? 0 : klds.back();
    s.kld_p999 = quantile(klds, 0.999);
    s.kld_p99 = quantile(klds, 0.99);
    s.kld_median = quantile(klds, 0.5);
    return s;
  }
};

}  // namespace

ChunkScorer generator_scorer(Generator& generator) {
  return [&generator](const std::vector<int32_t>& chunk, uint32_t first, const ScoredRow& row) {
    const uint32_t vocab = generator.vocab_size();
    generator.score(chunk, first, [&](uint32_t position, const std::vector<float>& logits) {
      if (position + 1 >= chunk.size()) return;  // the last row predicts past the chunk
      if (logits.size() != vocab)
        throw std::runtime_error("a row of " + std::to_string(logits.size()) + " logits for a vocabulary of " + std::to_string(vocab));
      const std::vector<double> lp = log_softmax(logits);
      row(position, lp[size_t(chunk[position + 1])], &lp);
    });
  };
}

ChunkPlan plan_chunks(size_t n_tokens, const PerplexityOptions& o) {
  if (o.n_ctx < 4) throw std::invalid_argument("a context of " + std::to_string(o.n_ctx) + " tokens is too small to score (4 at least)");
  if (n_tokens < 2 * size_t(o.n_ctx))
    throw std::invalid_argument("the text is " + std::to_string(n_tokens) + " tokens; a context of " + std::to_string(o.n_ctx) +
                                " needs " + std::to_string(2 * size_t(o.n_ctx)) + " at least (two chunks)");
  ChunkPlan p;
  const uint32_t whole = uint32_t(n_tokens / o.n_ctx);
  p.n_chunks = o.n_chunks < 0 ? whole : std::min<uint32_t>(whole, uint32_t(o.n_chunks));
  p.first = o.n_ctx / 2;
  p.rows = o.n_ctx - 1 - p.first;
  return p;
}

PerplexityResult run_perplexity(const ChunkScorer& scorer, const std::vector<int32_t>& tokens, uint32_t vocab_size,
                                const PerplexityOptions& o,
                                const std::function<void(uint32_t, uint32_t, double)>& on_chunk, LogitFileWriter* base_out,
                                LogitFileReader* base_in) {
  const ChunkPlan plan = plan_chunks(tokens.size(), o);
  PerplexityResult r;
  r.n_tokens = tokens.size();
  r.n_ctx = o.n_ctx;
  r.n_chunks = plan.n_chunks;
  const uint32_t first = plan.first, rows = plan.rows;
  if (base_in != nullptr) {
    const LogitFileShape& b = base_in->shape();
    auto mismatch = [&](const std::string& what) {
      throw std::invalid_argument(base_in->path() + " was saved from " + what + ": compare runs of the same text, context and chunks");
    };
    if (b.vocab != vocab_size) mismatch("a vocabulary of " + std::to_string(b.vocab) + " tokens, not " + std::to_string(vocab_size));
    if (b.n_ctx != o.n_ctx || b.first != first || b.rows_per_chunk != rows) mismatch("a context of " + std::to_string(b.n_ctx));
    if (b.n_chunks != r.n_chunks) mismatch(std::to_string(b.n_chunks) + " chunks, not " + std::to_string(r.n_chunks));
    if (!std::equal(base_in->tokens().begin(), base_in->tokens().end(), tokens.begin()))
      mismatch("other tokens (another text or tokenizer)");
  }

  double nll = 0, nll2 = 0;
  KlAccumulator kl;
  std::vector<int32_t> chunk(o.n_ctx);
  for (uint32_t c = 0; c < r.n_chunks; ++c) {
    std::copy_n(tokens.begin() + size_t(c) * o.n_ctx, o.n_ctx, chunk.begin());
    if (o.bos >= 0) chunk[0] = o.bos;  // llama-perplexity: each chunk starts as a text does
    uint32_t expected = first;
    scorer(chunk, first, [&](uint32_t position, double next_logprob, const std::vector<double>* distribution) {
      if (position != expected || position + 1 >= o.n_ctx)
        throw std::runtime_error("the scorer gave row " + std::to_string(position) + " where row " + std::to_string(expected) +
                                 " of a chunk of " + std::to_string(o.n_ctx) + " was due");
      ++expected;
      const double v = -next_logprob;
      nll += v;
      nll2 += v * v;
      ++r.scored;
      if ((base_out != nullptr || base_in != nullptr) && (distribution == nullptr || distribution->size() != vocab_size))
        throw std::invalid_argument("a KL divergence needs every scored position's whole distribution, which this scorer does not give");
      if (base_out != nullptr) base_out->add_row(*distribution);
      if (base_in != nullptr) kl.add(base_in->next_row(), *distribution, chunk[position + 1]);
    });
    if (expected != o.n_ctx - 1)
      throw std::runtime_error("the scorer gave rows up to " + std::to_string(expected) + " of a chunk of " + std::to_string(o.n_ctx));
    if (on_chunk) on_chunk(c + 1, r.n_chunks, std::exp(nll / double(r.scored)));
  }
  r.nll = nll;
  r.ppl = exp_of(estimate(nll, nll2, r.scored));
  if (base_in != nullptr) {
    r.has_kl = true;
    r.kl = kl.finish();
  }
  return r;
}

}  // namespace tokenhost
