// routing/: the confidence signal against plain loops over fresh random tokens, stop reasons, and the
// request keys a router sees: params_key equal exactly when the answer's parameters are, deterministic
// only for greedy or seeded requests without logprobs, payer ids stable per key.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "harness.hpp"
#include "routing/confidence.hpp"
#include "routing/route_keys.hpp"

namespace routing_tests {

using namespace tokenhost;
using namespace tokenhost::routing;

TEST_CASE("routing: the confidence signal is the mean and extremes of the tokens' log-probabilities and entropies", "[routing]") {
  auto rng = testing::fresh_rng("routing signal");
  std::uniform_real_distribution<float> lp(-9.0f, 0.0f), h(0.0f, 6.0f);
  for (int round = 0; round < 100; ++round) {
    ConfidenceSignal sig;
    std::vector<SampledToken> tokens(rng() % 50);
    double sum_lp = 0, sum_h = 0, min_lp = 0, max_h = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i].logprob = lp(rng);
      tokens[i].entropy = h(rng);
      sig.add(tokens[i]);
      sum_lp += tokens[i].logprob;
      sum_h += tokens[i].entropy;
      min_lp = i == 0 ? tokens[i].logprob : std::min(min_lp, double(tokens[i].logprob));
      max_h = i == 0 ? tokens[i].entropy : std::max(max_h, double(tokens[i].entropy));
    }
    const th_route_signal s = sig.signal(TH_STOP_LENGTH);
    REQUIRE(s.n_tokens == tokens.size());
    CHECK(s.stop == TH_STOP_LENGTH);
    const double n = tokens.empty() ? 1 : double(tokens.size());
    CHECK(s.mean_logprob == Approx(sum_lp / n).margin(1e-9));
    CHECK(s.mean_entropy == Approx(sum_h / n).margin(1e-9));
    CHECK(s.min_logprob == Approx(min_lp));
    CHECK(s.max_entropy == Approx(max_h));
  }
  CHECK(stop_of("stop") == TH_STOP_EOS);
  CHECK(stop_of("length") == TH_STOP_LENGTH);
  CHECK(stop_of("cancelled") == TH_STOP_CANCELLED);
  CHECK(stop_of("error") == TH_STOP_ERROR);
  CHECK(stop_of("") == TH_STOP_NONE);
}

TEST_CASE("routing: params_key changes with every parameter that shapes the answer, deterministic and payer ids", "[routing]") {
  AnswerParams base;
  base.model = "stories";
  base.max_tokens = 32;
  const uint64_t k = params_key(base);
  auto differs = [&](auto change) {
    AnswerParams p = base;
    change(p);
    return params_key(p) != k;
  };
  CHECK(differs([](AnswerParams& p) { p.model = "other"; }));
  CHECK(differs([](AnswerParams& p) { p.max_tokens = 33; }));
  CHECK(differs([](AnswerParams& p) { p.sampling.temperature = 0.5f; }));
  CHECK(differs([](AnswerParams& p) { p.sampling.top_k = 4; }));
  CHECK(differs([](AnswerParams& p) { p.sampling.repetition_penalty = 1.1f; }));
  CHECK(differs([](AnswerParams& p) { p.sampling.logit_bias.push_back({3, 1.0f}); }));
  CHECK(differs([](AnswerParams& p) { p.ignore_eos = true; }));
  CHECK(differs([](AnswerParams& p) { p.logprobs = true; }));
  // A greedy request's seed is unused: it does not split the key. A sampled one's does.
  CHECK_FALSE(differs([](AnswerParams& p) { p.sampling.seed = 99; }));
  AnswerParams hot = base;
  hot.sampling.temperature = 0.8f;
  hot.sampling.seed = 1;
  AnswerParams hot2 = hot;
  hot2.sampling.seed = 2;
  CHECK(params_key(hot) != params_key(hot2));
  CHECK(deterministic(base));
  CHECK_FALSE(deterministic(hot));
  hot.seeded = true;
  CHECK(deterministic(hot));
  base.logprobs = true;
  CHECK_FALSE(deterministic(base));  // a cached answer carries no log-probabilities
  CHECK(payer_id("") == "");
  CHECK(payer_id("key-one") == payer_id("key-one"));
  CHECK(payer_id("key-one") != payer_id("key-two"));
  CHECK(payer_id("key-one").size() == 20);
  CHECK(payer_id("key-one").rfind("key-", 0) == 0);
}

}  // namespace routing_tests
