// router.cascade: escalate() on recorded signals says TH_STAGE_ESCALATE exactly when the configured
// signal has crossed the threshold (at the end always, during generation from min_tokens on), accepts
// after accept_after tokens, and route() orders the models by declared cost, one engine each.
#include <catch2/catch.hpp>

#include <random>

#include "../router_under_test.hpp"

namespace router_cascade_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

int32_t verdict(RouterUnderTest& r, const th_route_signal& sig) {
  std::vector<int32_t> tokens(sig.n_tokens, 1);
  th_route_stage stage{};
  stage.struct_size = sizeof stage;
  stage.n_stages = 2;
  stage.engine_id = "engine0";
  stage.model = "small";
  stage.tokens = tokens.data();
  stage.signal = &sig;
  int32_t v = -1;
  th_error err;
  REQUIRE(r.inst->vtable<th_router_vtable>().escalate(r.inst->handle(), &stage, &v, &err) == TH_OK);
  return v;
}

th_route_signal signal_of(std::mt19937_64& rng, int32_t stop) {
  std::uniform_real_distribution<double> lp(-6.0, 0.0), h(0.0, 5.0);
  std::uniform_int_distribution<uint32_t> n(1, 60);
  th_route_signal s{};
  s.struct_size = sizeof s;
  s.n_tokens = n(rng);
  s.min_logprob = lp(rng);
  s.mean_logprob = s.min_logprob * std::uniform_real_distribution<double>(0, 1)(rng);
  s.max_entropy = h(rng);
  s.mean_entropy = s.max_entropy * std::uniform_real_distribution<double>(0, 1)(rng);
  s.stop = stop;
  return s;
}

}  // namespace

TEST_CASE("router.cascade: escalates exactly when the signal crosses the threshold, on fresh recorded signals", "[plugins][router]") {
  auto rng = testing::fresh_rng("cascade signals");
  struct Case {
    const char* signal;
    double threshold;
    double th_route_signal::*member;
    bool below;  // crossing is falling below (log-probabilities) rather than rising above (entropies)
  };
  const Case cases[] = {{"mean_logprob", -1.3, &th_route_signal::mean_logprob, true},
                        {"min_logprob", -4.0, &th_route_signal::min_logprob, true},
                        {"mean_entropy", 1.2, &th_route_signal::mean_entropy, false},
                        {"max_entropy", 3.0, &th_route_signal::max_entropy, false}};
  for (const auto& c : cases) {
    RouterUnderTest r("router.cascade", 2, toml::table{{"signal", c.signal}, {"threshold", c.threshold}});
    size_t escalations = 0;
    for (int i = 0; i < 400; ++i) {
      const th_route_signal s = signal_of(rng, i % 2 ? TH_STOP_EOS : TH_STOP_LENGTH);
      const bool crossed = c.below ? s.*c.member < c.threshold : s.*c.member > c.threshold;
      INFO(c.signal << " " << s.*c.member << " against " << c.threshold);
      CHECK(verdict(r, s) == (crossed ? TH_STAGE_ESCALATE : TH_STAGE_CONTINUE));
      escalations += crossed;
    }
    CHECK(escalations > 20);  // both branches were taken
    CHECK(escalations < 380);
    // The value at the threshold itself has not crossed it.
    th_route_signal at = signal_of(rng, TH_STOP_EOS);
    at.*c.member = c.threshold;
    CHECK(verdict(r, at) == TH_STAGE_CONTINUE);
  }
}

TEST_CASE("router.cascade: during generation it waits for min_tokens, and accepts after accept_after", "[plugins][router]") {
  RouterUnderTest r("router.cascade", 2, toml::table{{"threshold", -1.0}, {"min_tokens", 8}, {"accept_after", 20}});
  th_route_signal s{};
  s.struct_size = sizeof s;
  s.mean_logprob = -3.0;  // crossed
  s.stop = TH_STOP_NONE;
  s.n_tokens = 7;
  CHECK(verdict(r, s) == TH_STAGE_CONTINUE);  // too few tokens to judge yet
  s.n_tokens = 8;
  CHECK(verdict(r, s) == TH_STAGE_ESCALATE);
  s.n_tokens = 3;
  s.stop = TH_STOP_EOS;
  CHECK(verdict(r, s) == TH_STAGE_ESCALATE);  // at the end the check always applies
  s.mean_logprob = -0.5;
  s.stop = TH_STOP_NONE;
  s.n_tokens = 19;
  CHECK(verdict(r, s) == TH_STAGE_CONTINUE);
  s.n_tokens = 20;
  CHECK(verdict(r, s) == TH_STAGE_ACCEPT);
}

TEST_CASE("router.cascade: one stage per model, cheapest first, each on its least loaded healthy engine", "[plugins][router]") {
  RouterUnderTest r("router.cascade", 5, toml::table{{"check_every", 16}});
  const char* models[] = {"large", "small", "large", "medium", "small"};
  const double costs[] = {1.0, 0.2, 1.0, 0.5, 0.2};
  const uint32_t running[] = {3, 5, 1, 0, 2};
  for (size_t i = 0; i < 5; ++i) {
    r.candidates[i].model = models[i];
    r.candidates[i].cost_per_mtok = costs[i];
    r.candidates[i].running = running[i];
  }
  th_route_decision d;
  REQUIRE(r.route(d) == TH_OK);
  REQUIRE(d.action == TH_ROUTE_CASCADE);
  REQUIRE(d.n_cascade == 3);
  CHECK(std::vector<uint32_t>(r.cascade.begin(), r.cascade.begin() + 3) == std::vector<uint32_t>{4, 3, 2});
  CHECK(d.check_every == 16);
  r.candidates[4].healthy = 0;  // the small model's other engine serves
  REQUIRE(r.route(d) == TH_OK);
  CHECK(r.cascade[0] == 1);
  for (auto& c : r.candidates) c.model = "one";
  REQUIRE(r.route(d) == TH_OK);
  CHECK(d.action == TH_ROUTE_TARGET);  // one model: nothing to escalate to
}

}  // namespace router_cascade_tests
