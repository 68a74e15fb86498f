// router.vote: an ensemble of one engine per model, samples times each; select() keeps the majority's
// final answer (ties to the higher mean log-probability) or the highest mean log-probability, and
// never a failed answer.
#include <catch2/catch.hpp>

#include "../router_under_test.hpp"

namespace router_vote_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

uint32_t select(RouterUnderTest& r, const std::vector<std::string>& texts, const std::vector<double>& logprobs, const std::vector<bool>& failed) {
  std::vector<th_route_signal> sigs(texts.size());
  std::vector<th_route_answer> answers(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    sigs[i] = th_route_signal{sizeof(th_route_signal), 3, logprobs[i], logprobs[i] - 1, 1.0, 2.0, failed[i] ? TH_STOP_ERROR : TH_STOP_EOS};
    answers[i] = {sizeof(th_route_answer), uint32_t(i), "e", "m", nullptr, 0, texts[i].data(), texts[i].size(), &sigs[i]};
  }
  th_route_ensemble e{sizeof e, 1, answers.data(), uint32_t(answers.size())};
  uint32_t chosen = 99;
  th_error err;
  REQUIRE(r.inst->vtable<th_router_vtable>().select(r.inst->handle(), &e, &chosen, &err) == TH_OK);
  return chosen;
}

}  // namespace

TEST_CASE("router.vote: the majority's final answer wins, ties and the mean_logprob rule go to the surest", "[plugins][router]") {
  RouterUnderTest majority("router.vote", 2, toml::table{{"rule", "majority"}, {"samples", 3}});
  // " 42" and "42 " are one final answer: it has two votes against one surer answer.
  CHECK(select(majority, {"41", " 42", "42 "}, {-0.1, -2.0, -1.5}, {false, false, false}) == 2);
  CHECK(select(majority, {"a", "b"}, {-1.0, -0.5}, {false, false}) == 1);           // a tie: the surer
  CHECK(select(majority, {"a", "a", "b"}, {-1, -1, -0.1}, {true, true, false}) == 2);  // failed answers do not vote
  RouterUnderTest surest("router.vote", 2, toml::table{{"rule", "mean_logprob"}});
  CHECK(select(surest, {"41", "42", "42"}, {-0.1, -2.0, -1.5}, {false, false, false}) == 0);
  CHECK(select(surest, {"41", "42"}, {-0.1, -2.0}, {true, false}) == 1);
  // route(): one engine per model, the least loaded, samples each.
  majority.candidates[0].model = "small";
  majority.candidates[1].model = "large";
  th_route_decision d;
  REQUIRE(majority.route(d) == TH_OK);
  CHECK(d.action == TH_ROUTE_ENSEMBLE);
  CHECK(d.n_cascade == 2);
  CHECK(d.n_samples == 3);
}

}  // namespace router_vote_tests
