// Sampling: each rule against a plain computation of what it must do, on fresh random logits.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <numeric>

#include "harness.hpp"
#include "runtime/sampling.hpp"

namespace runtime_sampling_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::vector<float> random_logits(std::mt19937_64& rng, size_t n, float spread = 3.0f) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<double> softmax(const std::vector<float>& l, double temperature = 1.0) {
  double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp((l[i] - m) / temperature);
  for (auto& x : p) x /= s;
  return p;
}

// Frequencies of n samples.
std::map<int32_t, int> draw(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits, {}).token];
  return counts;
}

}  // namespace

TEST_CASE("sampling: temperature 0 is the argmax, with its log-probability", "[sampling]") {
  auto rng = fresh_rng("sampling greedy");
  for (int trial = 0; trial < 50; ++trial) {
    auto logits = random_logits(rng, 100);
    SamplingParams p;
    p.top_logprobs = 3;
    Sampler s(p);
    auto out = s.sample(logits, {});
    int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    REQUIRE(out.token == best);
    REQUIRE(std::abs(out.logprob - std::log(softmax(logits)[size_t(best)])) < 1e-5);
    REQUIRE(out.top.size() == 3);
    REQUIRE(out.top[0].token == best);
    REQUIRE(out.top[0].logprob >= out.top[1].logprob);
    REQUIRE(out.top[1].logprob >= out.top[2].logprob);
  }
}

TEST_CASE("sampling: with temperature, frequencies follow the tempered softmax", "[sampling]") {
  auto rng = fresh_rng("sampling temperature");
  auto logits = random_logits(rng, 8, 1.0f);
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = rng();
  Sampler s(p);
  const int n = 40000;
  auto counts = draw(s, logits, n);
  auto probs = softmax(logits, 0.7);
  for (size_t t = 0; t < logits.size(); ++t) {
    double expected = probs[t] * n, sd = std::sqrt(n * probs[t] * (1 - probs[t]));
    INFO("token " << t << " expected " << expected << " got " << counts[int32_t(t)]);
    REQUIRE(std::abs(counts[int32_t(t)] - expected) <= 5 * sd + 1);  // 5 sigma: fails by chance ~1e-6
  }
}

TEST_CASE("sampling: the same seed gives the same tokens", "[sampling]") {
  auto rng = fresh_rng("sampling seed");
  auto logits = random_logits(rng, 50, 1.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) REQUIRE(a.sample(logits, {}).token == b.sample(logits, {}).token);
}

TEST_CASE("sampling: top-k, top-p and min-p keep only the tokens they must", "[sampling]") {
  auto rng = fresh_rng("sampling filters");
  for (int trial = 0; trial < 20; ++trial) {
    auto logits = random_logits(rng, 30, 2.0f);
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    auto probs = softmax(logits);

    SamplingParams k;
    k.temperature = 1.0f;
    k.top_k = 3;
    k.seed = rng();
    Sampler sk(k);
    for (const auto& [t, c] : draw(sk, logits, 300)) REQUIRE(std::find(order.begin(), order.begin() + 3, t) != order.begin() + 3);

    SamplingParams tp;
    tp.temperature = 1.0f;
    tp.top_p = 0.6f;
    tp.seed = rng();
    size_t nucleus = 0;
    for (double sum = 0; nucleus < order.size() && sum < 0.6; ++nucleus) sum += probs[size_t(order[nucleus])];
    Sampler sp(tp);
    for (const auto& [t, c] : draw(sp, logits, 300))
      REQUIRE(std::find(order.begin(), order.begin() + long(nucleus), t) != order.begin() + long(nucleus));

    SamplingParams mp;
    mp.temperature = 1.0f;
    mp.min_p = 0.2f;
    mp.seed = rng();
    double best = probs[size_t(order[0])];
    Sampler sm(mp);
    for (const auto& [t, c] : draw(sm, logits, 300)) REQUIRE(probs[size_t(t)] >= 0.2 * best * (1 - 1e-9));
  }
}

TEST_CASE("sampling: penalties follow their formulas", "[sampling]") {
  auto rng = fresh_rng("sampling penalties");
  auto logits = random_logits(rng, 20);
  std::vector<int32_t> history = {3, 3, 5, 7, 3, 19};
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  auto out = logits;
  apply_penalties(out, history, p);
  for (int32_t t = 0; t < 20; ++t) {
    int count = int(std::count(history.begin(), history.end(), t));
    float want = logits[size_t(t)];
    if (count > 0) {
      want = want > 0 ? want / 1.3f : want * 1.3f;
      want -= float(count) * 0.5f + 0.25f;
    }
    REQUIRE(out[size_t(t)] == Approx(want).epsilon(1e-6));
  }
  p.penalty_last_n = 2;  // only {3, 19} count
  out = logits;
  apply_penalties(out, history, p);
  REQUIRE(out[5] == logits[5]);
  REQUIRE(out[19] != logits[19]);
}

TEST_CASE("sampling: out-of-range parameters are refused by name", "[sampling]") {
  SamplingParams p;
  p.top_p = 0.0f;
  REQUIRE_THROWS_WITH(Sampler(p), Catch::Contains("top_p"));
  p = {};
  p.temperature = -1.0f;
  REQUIRE_THROWS_WITH(Sampler(p), Catch::Contains("temperature"));
  p = {};
  p.repetition_penalty = 0.0f;
  REQUIRE_THROWS_WITH(Sampler(p), Catch::Contains("repetition_penalty"));
}

TEST_CASE("sampling: logit_bias is added to the logits before everything else", "[sampling]") {
  auto rng = fresh_rng("sampling logit bias");
  for (int trial = 0; trial < 50; ++trial) {
    auto logits = random_logits(rng, 100);
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const int32_t pick = int32_t(rng() % 100);
    const float bias = float(int(rng() % 200) - 100) / 4.0f;  // any value in [-25, 25)
    SamplingParams p;
    p.logit_bias = {{pick, bias}};
    p.top_logprobs = 1;
    Sampler s(p);
    auto out = s.sample(logits, {});
    std::vector<float> biased = logits;
    biased[size_t(pick)] += bias;
    const int32_t expected = int32_t(std::max_element(biased.begin(), biased.end()) - biased.begin());
    REQUIRE(out.token == expected);
    REQUIRE(std::abs(out.logprob - std::log(softmax(biased)[size_t(expected)])) < 1e-5);
    // -100 on the best token: never chosen, whatever the temperature; +100 on another: always chosen.
    SamplingParams ban;
    ban.temperature = 1.0f;
    ban.seed = rng();
    ban.logit_bias = {{best, -100.0f}};
    Sampler banned(ban);
    SamplingParams force = ban;
    force.logit_bias = {{pick, 100.0f}};
    Sampler forced(force);
    for (int i = 0; i < 20; ++i) {
      REQUIRE(banned.sample(logits, {}).token != best);
      REQUIRE(forced.sample(logits, {}).token == pick);
    }
  }
  SamplingParams bad;
  bad.logit_bias = {{3, 101.0f}};
  REQUIRE_THROWS_WITH(Sampler(bad), Catch::Contains("logit_bias values must be in [-100, 100]"));
}

TEST_CASE("sampling: speculative sampling of drafts drawn from q follows the target's distribution", "[sampling]") {
  // Draft tokens drawn from a random q (its support a random subset of the vocabulary, some of it where
  // the target has no mass) and verified by verify_draft: the tokens returned, accepted or drawn from
  // the residual, must follow p (tempered softmax, top-k when set), and the acceptance rate must be
  // sum(min(p, q)).
  auto rng = fresh_rng("sampling speculative");
  for (int trial = 0; trial < 4; ++trial) {
    const size_t vocab = 12;
    auto logits = random_logits(rng, vocab, 1.5f);
    SamplingParams params;
    params.temperature = trial % 2 == 0 ? 1.0f : 0.7f;
    params.top_k = trial >= 2 ? 6 : 0;
    params.seed = rng();
    // p by plain loops: the tempered softmax over the top-k tokens (all when top_k is 0).
    std::vector<double> p = softmax(logits, params.temperature);
    if (params.top_k > 0) {
      std::vector<size_t> order(vocab);
      std::iota(order.begin(), order.end(), size_t(0));
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
      double kept = 0;
      for (size_t i = 0; i < vocab; ++i) {
        if (i >= size_t(params.top_k)) p[order[i]] = 0;
        kept += p[order[i]];
      }
      for (auto& x : p) x /= kept;
    }
    DraftDistribution q;
    std::vector<double> q_dense(vocab, 0.0);
    double q_sum = 0;
    for (size_t t = 0; t < vocab; ++t) {
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) continue;
      q_dense[t] = std::uniform_real_distribution<double>(0.1, 1.0)(rng);
      q_sum += q_dense[t];
    }
    if (q_sum == 0) q_dense[0] = q_sum = 1;
    for (size_t t = 0; t < vocab; ++t) {
      q_dense[t] /= q_sum;
      if (q_dense[t] > 0) q.emplace_back(int32_t(t), float(q_dense[t]));
    }
    Sampler s(params);
    std::discrete_distribution<int32_t> from_q(q_dense.begin(), q_dense.end());
    const int n = 40000;
    std::vector<int> counts(vocab, 0);
    int accepted_count = 0;
    for (int i = 0; i < n; ++i) {
      const int32_t draft = from_q(rng);
      bool accepted = false;
      const SampledToken t = s.verify_draft(logits, {}, draft, q, accepted);
      REQUIRE(t.token >= 0);
      REQUIRE(size_t(t.token) < vocab);
      if (accepted) REQUIRE(t.token == draft);
      accepted_count += accepted;
      ++counts[size_t(t.token)];
    }
    INFO("trial " << trial << ", temperature " << params.temperature << ", top_k " << params.top_k);
    for (size_t t = 0; t < vocab; ++t) {
      const double expected = p[t] * n, sd = std::sqrt(n * p[t] * (1 - p[t]));
      INFO("token " << t << " expected " << expected << " got " << counts[t]);
      REQUIRE(std::abs(counts[t] - expected) <= 5 * sd + 1);
    }
    double overlap = 0;
    for (size_t t = 0; t < vocab; ++t) overlap += std::min(p[t], q_dense[t]);
    const double sd = std::sqrt(n * overlap * (1 - overlap));
    INFO("accepted " << accepted_count << ", expected " << overlap * n);
    REQUIRE(std::abs(accepted_count - overlap * n) <= 5 * sd + 1);
  }
}

TEST_CASE("sampling: a greedy request's draft is accepted exactly when it is the best token", "[sampling]") {
  auto rng = fresh_rng("sampling speculative greedy");
  for (int trial = 0; trial < 50; ++trial) {
    auto logits = random_logits(rng, 20);
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const int32_t draft = trial % 2 == 0 ? best : (best + 1) % 20;
    Sampler s{SamplingParams{}};
    bool accepted = false;
    const SampledToken t = s.verify_draft(logits, {}, draft, {{draft, 0.5f}, {(draft + 3) % 20, 0.5f}}, accepted);
    REQUIRE(t.token == best);
    REQUIRE(accepted == (draft == best));
  }
}

TEST_CASE("sampling: every token carries the entropy of the distribution it came from, against float64", "[sampling]") {
  auto rng = fresh_rng("sampling entropy");
  for (int round = 0; round < 40; ++round) {
    const size_t n = 2 + rng() % 3000;
    const auto logits = random_logits(rng, n, float(0.1 + double(rng() % 80) / 10.0));
    const auto p = softmax(logits);
    double want = 0;
    for (double x : p)
      if (x > 0) want -= x * std::log(x);
    for (float temperature : {0.0f, 0.7f, 1.0f}) {
      SamplingParams params;
      params.temperature = temperature;  // the entropy is of the model's distribution, whatever the draw's temperature
      params.seed = rng();
      Sampler s(params);
      const SampledToken t = s.sample(logits, {});
      INFO("vocabulary " << n << ", temperature " << temperature);
      CHECK(t.entropy == Approx(want).margin(1e-4).epsilon(1e-4));
      CHECK(t.logprob == Approx(std::log(p[size_t(t.token)])).margin(1e-4));
    }
  }
  // A certain token: no entropy; a uniform distribution: log n.
  SamplingParams greedy;
  Sampler s(greedy);
  std::vector<float> sure(100, -1000.0f);
  sure[3] = 10.0f;
  CHECK(s.sample(sure, {}).entropy == Approx(0.0).margin(1e-6));
  CHECK(s.sample(std::vector<float>(64, 0.5f), {}).entropy == Approx(std::log(64.0)).epsilon(1e-5));
}

}  // namespace runtime_sampling_tests
