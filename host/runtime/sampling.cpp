#include "runtime/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "backends/cpu/vector_ops.hpp"

namespace tokenhost {

void validate(const SamplingParams& p) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (!(p.temperature >= 0.0f) || p.temperature > 100.0f) bad("temperature must be in [0, 100]");
  if (p.top_k < 0) bad("top_k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) bad("min_p must be in [0, 1)");
  if (!(p.repetition_penalty > 0.0f)) bad("repetition_penalty must be > 0");
  if (!std::isfinite(p.frequency_penalty) || std::abs(p.frequency_penalty) > 100.0f) bad("frequency_penalty must be in [-100, 100]");
  if (!std::isfinite(p.presence_penalty) || std::abs(p.presence_penalty) > 100.0f) bad("presence_penalty must be in [-100, 100]");
  if (p.penalty_last_n < -1) bad("penalty_last_n must be >= -1");
  if (p.top_logprobs > 20) bad("top_logprobs must be at most 20");
  for (const auto& [token, bias] : p.logit_bias)
    if (token < 0 || !std::isfinite(bias) || std::abs(bias) > 100.0f) bad("logit_bias values must be in [-100, 100] for token ids >= 0");
}

void apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& history, const SamplingParams& p) {
  for (const auto& [token, bias] : p.logit_bias)
    if (token >= 0 && size_t(token) < logits.size()) logits[size_t(token)] += bias;
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  size_t n = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [token, count] : counts) {
    if (token < 0 || size_t(token) >= logits.size()) continue;
    float& l = logits[size_t(token)];
    l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= float(count) * p.frequency_penalty + p.presence_penalty;
  }
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) { validate(params_); }

// The candidates a draw chooses among and their weights (unnormalized probabilities), with what the
// log-probabilities need. `order` empty: every token, in id order (weights[i] is token i's).
struct Sampler::Weights {
  std::vector<int32_t> order;
  std::vector<double> weights;
  size_t k = 0;        // candidates: the first k of order (of the vocabulary when order is empty)
  double total = 0;    // the sum of weights[0..k)
  double log_norm = 0; // log of the (penalized, temperature 1) softmax's denominator
  double entropy = 0;  // of that softmax, in nats
  int32_t token(size_t i) const { return order.empty() ? int32_t(i) : order[i]; }
};

Sampler::Weights Sampler::weights(const std::vector<float>& logits) const {
  Weights w;
  // Log-probabilities under the (penalized) model distribution, for the chosen token and the top-n.
  const float max_logit = vec::max(logits.data(), logits.size());
  const bool top_k_cuts = params_.top_k > 0 && size_t(params_.top_k) < logits.size();
  // A draw at temperature 1 from every token in id order weighs them by these same exponentials: kept
  // then, not computed twice.
  const bool draw_from_all = params_.temperature == 1.0f && !top_k_cuts && params_.top_p == 1.0f;
  // exp(logit - max) for every token, through the vectorized exponential (the vocabulary's exponentials
  // were the sampler's main cost), summed in double.
  std::vector<float> exps(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) exps[i] = logits[i] - max_logit;
  vec::exp(exps.data(), exps.data(), exps.size());
  // A constraint's disallowed tokens are at -inf (the vectorized exponential clamps: their weight is
  // set to exactly 0 here, so no draw can reach them).
  const bool masked = std::any_of(logits.begin(), logits.end(), [](float l) { return l == -INFINITY; });
  if (masked)
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] == -INFINITY) exps[i] = 0;
  const double norm = vec::sum(exps.data(), exps.size());
  w.log_norm = std::log(norm) + max_logit;
  // H = -sum p log p with p = e/norm and log p = (logit - max) - log norm: log norm - sum e (logit - max) / norm.
  double weighted = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (exps[i] != 0) weighted += double(exps[i]) * double(logits[i] - max_logit);
  w.entropy = std::max(0.0, std::log(norm) - weighted / norm);
  if (params_.temperature == 0.0f) return w;
  if (draw_from_all && params_.min_p == 0.0f) {
    w.weights.assign(exps.begin(), exps.end());  // every token, in id order, by its exponential
    w.k = exps.size();
    w.total = norm;
    return w;
  }
  auto by_logit = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  std::vector<int32_t>& order = w.order;
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Candidates: the top-k (sorted) when top_k is set, else every token (in id order: sorting the
  // whole vocabulary per token is what top-p alone needs, and only then is it paid for).
  size_t k = order.size();
  if (top_k_cuts) {
    k = size_t(params_.top_k);
    std::partial_sort(order.begin(), order.begin() + long(k), order.end(), by_logit);
    order.resize(k);
  } else if (params_.top_p < 1.0f) {
    std::sort(order.begin(), order.end(), by_logit);
  }
  std::vector<double>& probs = w.weights;
  probs.resize(k);
  if (draw_from_all) {
    std::copy(exps.begin(), exps.end(), probs.begin());
  } else {
    const float inv_t = 1.0f / params_.temperature;
    exps.resize(k);
    for (size_t i = 0; i < k; ++i) exps[i] = (logits[size_t(order[i])] - max_logit) * inv_t;
    vec::exp(exps.data(), exps.data(), k);
    if (masked)
      for (size_t i = 0; i < k; ++i)
        if (logits[size_t(order[i])] == -INFINITY) exps[i] = 0;
    std::copy(exps.begin(), exps.end(), probs.begin());
  }
  if (params_.min_p > 0.0f) {
    // Drop tokens less than min_p times as likely as the best (the best has weight 1 here).
    size_t kept = 0;
    for (size_t i = 0; i < k; ++i) {
      if (probs[i] >= params_.min_p) {
        probs[kept] = probs[i];
        order[kept++] = order[i];
      }
    }
    k = kept;
    probs.resize(k);
    order.resize(k);
  }
  if (params_.top_p < 1.0f) {
    // order is sorted here: keep the smallest prefix whose mass reaches top_p.
    const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
    double sum = 0;
    for (size_t i = 0; i < k; ++i) {
      sum += probs[i] / total;
      if (sum >= params_.top_p) {
        k = i + 1;
        break;
      }
    }
  }
  w.k = k;
  w.total = std::accumulate(probs.begin(), probs.begin() + long(k), 0.0);
  return w;
}

// The candidate whose cumulative weight (weights[0..k) in candidate order) passes a point uniform in
// [0, total): what std::discrete_distribution does, without building and normalizing its table for
// each token. Rounding can leave the point at the very end: then the last candidate with any weight.
size_t Sampler::draw(const std::vector<double>& weights, size_t k, double total) {
  const double point = std::generate_canonical<double, 53>(rng_) * total;
  size_t last_weighted = 0;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    if (weights[i] > 0) last_weighted = i;
    sum += weights[i];
    if (point < sum) return i;
  }
  return last_weighted;
}

namespace {

// token's log-probability and the n most likely tokens' (best first; ties: the lower id), under the
// softmax of logits whose log denominator is log_norm.
SampledToken with_logprobs(const std::vector<float>& logits, double log_norm, int32_t token, uint32_t n) {
  auto logprob = [&](int32_t t) { return float(double(logits[size_t(t)]) - log_norm); };
  SampledToken out;
  out.token = token;
  out.logprob = logprob(token);
  if (n > 0) {
    std::vector<int32_t> best(logits.size());
    std::iota(best.begin(), best.end(), 0);
    const size_t k = std::min(best.size(), size_t(n));
    std::partial_sort(best.begin(), best.begin() + long(k), best.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (size_t i = 0; i < k; ++i)
      if (logits[size_t(best[i])] != -INFINITY) out.top.push_back({best[i], logprob(best[i])});  // not a masked token
  }
  return out;
}

}  // namespace

double log_sum_exp(const std::vector<float>& logits) {
  double best = -INFINITY;
  for (float v : logits) best = std::max(best, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - best);
  return best + std::log(sum);
}

// The chosen token with its log-probability and the top_logprobs best, under the penalized model.
SampledToken Sampler::annotate(const std::vector<float>& logits, const Weights& w, int32_t token) const {
  SampledToken out = with_logprobs(logits, w.log_norm, token, params_.top_logprobs);
  out.entropy = float(w.entropy);
  return out;
}

SampledToken score_token(const std::vector<float>& logits, int32_t token, uint32_t top_n) {
  if (token < 0 || size_t(token) >= logits.size())
    throw std::out_of_range("score_token: token " + std::to_string(token) + " outside " + std::to_string(logits.size()) + " logits");
  return with_logprobs(logits, log_sum_exp(logits), token, top_n);
}

SampledToken Sampler::sample(std::vector<float> logits, const std::vector<int32_t>& history) {
  apply_penalties(logits, history, params_);
  const Weights w = weights(logits);
  int32_t token;
  if (params_.temperature == 0.0f) token = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // the first best
  else token = w.token(draw(w.weights, w.k, w.total));
  return annotate(logits, w, token);
}

std::string draft_distribution_problem(const DraftDistribution& q, int32_t token, uint32_t vocab_size) {
  double sum = 0;
  bool holds = false;
  for (const auto& [t, p] : q) {
    if (t < 0 || uint32_t(t) >= vocab_size)
      return "lists token " + std::to_string(t) + ", outside the vocabulary of " + std::to_string(vocab_size);
    if (!(p > 0 && p <= 1)) return "gives token " + std::to_string(t) + " probability " + std::to_string(p) + " (must be in (0, 1])";
    sum += p;
    holds = holds || t == token;
  }
  if (!holds) return "does not list the drafted token " + std::to_string(token);
  if (sum > 1.0 + 1e-3) return "sums to " + std::to_string(sum) + ", more than 1";
  return "";
}

SampledToken Sampler::verify_draft(std::vector<float> logits, const std::vector<int32_t>& history, int32_t draft,
                                   const DraftDistribution& q, bool& accepted) {
  if (params_.temperature == 0.0f) {
    // p is all on the best token: accepting with p/q and drawing from (p - q)+ both give it.
    SampledToken t = sample(std::move(logits), history);
    accepted = t.token == draft;
    return t;
  }
  apply_penalties(logits, history, params_);
  const Weights w = weights(logits);
  std::unordered_map<int32_t, double> q_of;
  for (const auto& [token, prob] : q) q_of[token] += prob;
  auto q_at = [&](int32_t t) {
    auto it = q_of.find(t);
    return it == q_of.end() ? 0.0 : it->second;
  };
  double p_draft = 0;
  for (size_t i = 0; i < w.k; ++i)
    if (w.token(i) == draft) p_draft = w.weights[i] / w.total;
  // Accept with probability min(1, p / q).
  accepted = std::generate_canonical<double, 53>(rng_) * q_at(draft) < p_draft;
  if (accepted) return annotate(logits, w, draft);
  // Rejected: draw from the residual max(0, p - q), normalized.
  std::vector<double> residual(w.k);
  double total = 0;
  for (size_t i = 0; i < w.k; ++i) total += residual[i] = std::max(0.0, w.weights[i] / w.total - q_at(w.token(i)));
  const int32_t token = total > 0 ? w.token(draw(residual, w.k, total)) : w.token(draw(w.weights, w.k, w.total));
  return annotate(logits, w, token);
}

}  // namespace tokenhost
