// The draft-length controller: its allocation against a brute force over every draft length vector on
// fresh random inputs, its cost fit against the line it was fed, and its behaviour at both ends of the
// load (drafts at one stream, none at a large batch) and after a proposer stops being right.
#include <catch2/catch.hpp>

#include <functional>

#include "harness.hpp"
#include "speculation/draft_controller.hpp"

namespace speculation_draft_controller_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

using Cost = std::function<double(uint32_t)>;

double goodput(const std::vector<double>& alpha, const std::vector<uint32_t>& k, double base_tokens, uint32_t base_rows,
               const Cost& cost) {
  double tokens = base_tokens;
  uint32_t rows = base_rows;
  for (size_t i = 0; i < k.size(); ++i) {
    double p = 1;
    for (uint32_t j = 1; j <= k[i]; ++j) tokens += p *= alpha[i];
    rows += k[i];
  }
  return tokens / cost(rows);
}

// The best goodput over every k with k[i] <= caps[i].
double brute_force_best(const std::vector<double>& alpha, const std::vector<uint32_t>& caps, double base_tokens, uint32_t base_rows,
                        const Cost& cost) {
  std::vector<uint32_t> k(caps.size(), 0);
  double best = 0;
  std::function<void(size_t)> walk = [&](size_t i) {
    if (i == caps.size()) {
      best = std::max(best, goodput(alpha, k, base_tokens, base_rows, cost));
      return;
    }
    for (k[i] = 0; k[i] <= caps[i]; ++k[i]) walk(i + 1);
    k[i] = 0;
  };
  walk(0);
  return best;
}

}  // namespace

TEST_CASE("best_draft_lengths reaches the brute force's goodput on random steps and step costs", "[draft_controller]") {
  auto rng = fresh_rng("best_draft_lengths");
  std::uniform_real_distribution<double> unit(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 1 + rng() % 4;
    std::vector<double> alpha;
    std::vector<uint32_t> caps;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t kind = rng() % 6;  // edges too: never right, always right
      alpha.push_back(kind == 0 ? 0.0 : kind == 1 ? 1.0 : unit(rng));
      caps.push_back(uint32_t(rng() % 6));
    }
    const double base_tokens = double(1 + rng() % n);
    const uint32_t base_rows = uint32_t(base_tokens) + uint32_t(rng() % 20);
    // A line, or (every other trial) a line with a random step up at each row count, as kernels that
    // take rows in groups make it.
    const double a = 0.001 + unit(rng) * 0.02, b = unit(rng) * 0.004;
    std::vector<double> steps_up(64, 0.0);
    for (size_t r = 1; r < steps_up.size(); ++r) steps_up[r] = steps_up[r - 1] + (trial % 2 ? unit(rng) * 0.01 : 0.0);
    const Cost cost = [&](uint32_t rows) { return a + b * rows + steps_up.at(rows); };
    const auto k = best_draft_lengths(alpha, caps, base_tokens, base_rows, cost);
    REQUIRE(k.size() == n);
    for (size_t i = 0; i < n; ++i) REQUIRE(k[i] <= caps[i]);
    const double got = goodput(alpha, k, base_tokens, base_rows, cost);
    const double best = brute_force_best(alpha, caps, base_tokens, base_rows, cost);
    INFO("trial " << trial << " n " << n << " a " << a << " b " << b);
    REQUIRE(got == Approx(best).epsilon(1e-9));
    for (size_t i = 0; i < n; ++i)
      if (alpha[i] == 0.0) REQUIRE(k[i] == 0);  // a draft that is never kept only costs
  }
}

TEST_CASE("the adaptive controller drafts at one stream and not in a large batch", "[draft_controller]") {
  // A step costs 10 ms of fixed work plus 1 ms per row, as fed to the fit.
  DraftController c(DraftPolicy::adaptive);
  auto rng = fresh_rng("controller load");
  for (int i = 0; i < 200; ++i) {
    const uint32_t rows = 1 + uint32_t(rng() % 64);
    c.observe_step(rows, 0.010 + 0.001 * rows, rows % 2 == 0);
  }
  REQUIRE(c.cost_fitted());
  CHECK(c.cost_fixed() == Approx(0.010).epsilon(1e-6));
  CHECK(c.cost_per_row() == Approx(0.001).epsilon(1e-6));
  for (uint64_t seq = 0; seq < 64; ++seq)
    for (int d = 0; d < 20; ++d) c.observe_draft(seq, 4, 3);  // three of four kept, then one rejected
  CHECK(c.acceptance(7) == Approx(0.75).margin(0.05));

  const auto one = c.choose({{7, 8}}, 1, 1);
  CHECK(one[0] >= 4);  // a row costs a tenth of a one-row step; a kept token saves a whole step
  std::vector<DraftController::Offer> many;
  for (uint64_t seq = 0; seq < 64; ++seq) many.push_back({seq, 4});
  const auto big = c.choose(many, 64, 64);  // 64 rows cost 74 ms: a row costs 0.86 of the tokens it yields
  for (uint32_t k : big) CHECK(k == 0);

  // Where a row count was measured, its mean counts, not the line: a five-row step that costs as much
  // as eight one-row steps makes a four-token draft at one stream not worth it.
  DraftController steps(DraftPolicy::adaptive);
  for (int i = 0; i < 50; ++i)
    for (uint32_t rows : {1u, 2u, 3u, 4u, 8u}) steps.observe_step(rows, 0.010 + 0.001 * rows, rows > 1);
  for (int d = 0; d < 20; ++d) steps.observe_draft(7, 4, 3);
  REQUIRE(steps.choose({{7, 4}}, 1, 1)[0] == 4);  // every row count on the line: the whole draft pays
  for (int i = 0; i < 3; ++i) steps.observe_step(5, 0.088, true);
  CHECK(steps.step_cost(5) == Approx(0.088));
  CHECK(steps.step_cost(6) == Approx(0.088 + (0.018 - 0.088) / 3));  // between measured counts: joining them
  CHECK(steps.choose({{7, 4}}, 1, 1)[0] == 3);
  // Past the largest measured count, at the steeper of the line's slope and the local one: a large
  // batch whose last rows cost 40 ms each does not get draft rows priced at the small-batch line's.
  for (int i = 0; i < 2; ++i) steps.observe_step(63, 0.600, false), steps.observe_step(64, 0.640, false);
  CHECK(steps.step_cost(66) == Approx(0.720));
  std::vector<DraftController::Offer> batch;
  for (uint64_t seq = 0; seq < 64; ++seq) batch.push_back({seq, 4});
  for (uint32_t k : steps.choose(batch, 64, 64)) CHECK(k == 0);  // a row costs four tokens' worth: no draft pays

  DraftController fixed(DraftPolicy::fixed);
  CHECK(fixed.choose(many, 64, 64) == std::vector<uint32_t>(64, 4));
}

TEST_CASE("the adaptive controller prices a step that also prefills as the decode step of its sampled tokens", "[draft_controller]") {
  // A machine where rows cost what they cost: 2 ms each and 2 ms a step. At 8 decoding sequences a draft
  // row costs as much as a sequence's whole token; at one it costs a third of a step.
  DraftController c(DraftPolicy::adaptive);
  for (int i = 0; i < 20; ++i)
    for (uint32_t rows : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 12u, 16u}) c.observe_step(rows, 0.002 + 0.002 * rows, rows > 8);
  for (uint64_t seq = 0; seq < 8; ++seq)
    for (int d = 0; d < 20; ++d) c.observe_draft(seq, 5, 4);  // four of five kept
  std::vector<DraftController::Offer> eight;
  for (uint64_t seq = 0; seq < 8; ++seq) eight.push_back({seq, 4});
  for (uint32_t k : c.choose(eight, 8, 8)) CHECK(k == 0);
  // The same eight beside a 64-token prefill chunk: the chunk's 128 ms make the step's own goodput low
  // (8 tokens in 146 ms), beside which a draft row (0.8 tokens for 2 ms) would look cheap; it is not:
  // the chunk is prefilled either way, and the draft rows cost what they cost in the decode step.
  for (uint32_t k : c.choose(eight, 8, 8 + 64)) CHECK(k == 0);
  // One sequence decoding beside the chunk drafts as it would alone.
  const uint32_t alone = c.choose({{0, 4}}, 1, 1)[0];
  REQUIRE(alone > 0);
  CHECK(c.choose({{0, 4}}, 1, 1 + 64)[0] == alone);
}

TEST_CASE("the adaptive controller prices what proposing a draft token costs", "[draft_controller]") {
  // Steps cost 10 ms + 1 ms per row; three of four draft tokens are kept.
  DraftController c(DraftPolicy::adaptive);
  for (int i = 0; i < 50; ++i)
    for (uint32_t rows : {1u, 2u, 3u, 4u, 5u, 8u}) c.observe_step(rows, 0.010 + 0.001 * rows, rows > 1);
  for (int d = 0; d < 20; ++d) c.observe_draft(7, 4, 3);
  REQUIRE(c.choose({{7, 4}}, 1, 1)[0] == 4);  // a lookup proposer: drafts cost only their rows
  // A draft model whose token costs 1 ms: a four-token draft costs 4 + 4 ms for 2.3 tokens expected
  // more than the 11 ms step's one: still worth it.
  for (int i = 0; i < 50; ++i) c.observe_propose(4, 0.004);
  CHECK(c.propose_cost_per_token() == Approx(0.001));
  CHECK(c.choose({{7, 4}}, 1, 1)[0] > 0);
  // One whose token costs as much as a step of the target: no draft pays.
  for (int i = 0; i < 300; ++i) c.observe_propose(4, 0.044);
  CHECK(c.propose_cost_per_token() == Approx(0.011).epsilon(0.01));
  CHECK(c.choose({{7, 4}}, 1, 1)[0] == 0);
  c.observe_propose(0, 5.0);  // a call that drafted nothing says nothing of a token's cost
  CHECK(c.propose_cost_per_token() == Approx(0.011).epsilon(0.01));
  c.forget_propose_cost();  // the proposer was swapped
  CHECK(c.choose({{7, 4}}, 1, 1)[0] == 4);
}

TEST_CASE("the adaptive controller stops drafting a wrong proposer and tries again later", "[draft_controller]") {
  DraftController c(DraftPolicy::adaptive);
  for (int i = 0; i < 50; ++i) c.observe_step(1 + uint32_t(i % 5), 0.010 + 0.001 * (1 + i % 5), true);
  REQUIRE(c.choose({{1, 4}}, 1, 1)[0] > 0);  // the prior (half the tokens kept) is worth a draft at one stream
  for (int i = 0; i < 30; ++i) c.observe_draft(1, 4, 0);
  CHECK(c.acceptance(1) < 0.1);
  CHECK(c.choose({{1, 4}}, 1, 1)[0] == 0);
  CHECK(c.choose({{2, 4}}, 1, 1)[0] == 0);  // a new sequence starts from the pooled rate
  int steps = 0;
  for (; steps < 2000 && c.choose({{1, 4}}, 1, 1)[0] == 0; ++steps) {
    c.observe_no_draft(1);
    c.observe_step(1, 0.011, false);
  }
  CHECK(steps > 20);    // not at once
  CHECK(steps < 2000);  // but again, to see whether the proposer got better
  c.forget(1);
  CHECK(c.acceptance(1) == Approx(c.pooled_acceptance()));
}

TEST_CASE("the adaptive controller follows a step cost that changes over time, both ways", "[draft_controller]") {
  // One stream whose proposer keeps four of five draft tokens. Draft rows are cheap (0.5 ms beside a
  // 10 ms step), then expensive (30 ms each: the machine got busy), then cheap again. The controller
  // must stop drafting in the second phase and start again in the third: measurements it stopped taking
  // age out (kForgetAfterSteps), so one expensive phase cannot switch speculation off for good.
  using CostFn = std::function<double(uint32_t)>;
  const CostFn cheap = [](uint32_t rows) { return 0.010 + 0.0005 * (rows - 1); };
  const CostFn dear = [](uint32_t rows) { return 0.010 + 0.030 * (rows - 1); };
  auto rng = fresh_rng("controller phases");
  DraftController c(DraftPolicy::adaptive);
  // The share of steps that verified a draft over the second half of a phase of `steps` steps.
  auto phase = [&](const CostFn& cost, int steps) {
    int drafted = 0;
    for (int i = 0; i < steps; ++i) {
      const uint32_t k = c.choose({{7, 5}}, 1, 1)[0];
      const uint32_t rows = 1 + k;
      const double noise = 1 + 0.05 * (double(rng() % 1000) / 1000.0 - 0.5);  // +-2.5%
      c.observe_step(rows, cost(rows) * noise, k > 0);
      if (k > 0) c.observe_draft(7, k, (4 * k) / 5);
      else c.observe_no_draft(7);
      if (i >= steps / 2) drafted += k > 0;
    }
    return double(drafted) / double(steps - steps / 2);
  };
  const double first = phase(cheap, 1000);
  CHECK(first > 0.9);
  const double busy = phase(dear, 3 * int(DraftController::kForgetAfterSteps) * 3);
  CHECK(busy < 0.05);  // it stops, and re-measures at a bounded rate
  CHECK(busy > 0);     // ... but does re-measure
  const double again = phase(cheap, 3 * int(DraftController::kForgetAfterSteps));
  CHECK(again > 0.9);  // it drafts again once the steps are cheap again
}

TEST_CASE("draft policies parse by name", "[draft_controller]") {
  DraftPolicy p = DraftPolicy::fixed;
  REQUIRE(parse_draft_policy("adaptive", p));
  CHECK(p == DraftPolicy::adaptive);
  REQUIRE(parse_draft_policy("fixed", p));
  CHECK(std::string(draft_policy_name(p)) == "fixed");
  CHECK_FALSE(parse_draft_policy("Adaptive", p));
}

}  // namespace speculation_draft_controller_tests
