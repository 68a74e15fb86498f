// ExpertLoad (base/expert_load.hpp): a gate's choices counted per layer and expert (those of weight 0,
// dropped, not), against plain counts of fresh random choices; an id outside the layer's experts is refused, naming it, and counts
// nothing; drain() hands each count over once; the imbalance is the busiest expert over the mean.
#include <catch2/catch.hpp>

#include <map>

#include "base/expert_load.hpp"
#include "harness.hpp"

namespace expert_load_tests {

using namespace tokenhost;

TEST_CASE("expert load: choices counted per layer and expert, drained once, bad ids refused", "[moe][expert_load]") {
  auto rng = testing::fresh_rng("expert load");
  const uint32_t layers = 3, experts = 8;
  ExpertLoad load(layers, experts);
  std::vector<std::vector<uint64_t>> want(layers, std::vector<uint64_t>(experts));
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> drained;
  for (int round = 0; round < 20; ++round) {
    const uint32_t layer = uint32_t(rng() % layers);
    std::vector<int32_t> ids(1 + rng() % 40);
    std::vector<float> weights(ids.size());
    for (auto& id : ids) id = int32_t(rng() % (rng() % 2 ? 2 : experts));  // skewed towards experts 0 and 1
    for (auto& w : weights) w = rng() % 4 == 0 ? 0.0f : 0.5f;                // a quarter dropped
    REQUIRE(load.add(layer, ids.data(), weights.data(), ids.size()).empty());
    for (size_t i = 0; i < ids.size(); ++i)
      if (weights[i] != 0.0f) ++want[layer][uint32_t(ids[i])];
    if (round % 5 == 4) load.drain([&](uint32_t l, uint32_t e, uint64_t n) { drained[{l, e}] += n; });
  }
  load.drain([&](uint32_t l, uint32_t e, uint64_t n) { drained[{l, e}] += n; });
  load.drain([&](uint32_t, uint32_t, uint64_t) { FAIL("a count was handed over twice"); });
  for (uint32_t l = 0; l < layers; ++l) {
    REQUIRE(load.totals(l) == want[l]);
    for (uint32_t e = 0; e < experts; ++e) REQUIRE(drained[{l, e}] == want[l][e]);
  }

  const std::vector<int32_t> bad = {1, 8, 2};
  const std::vector<float> ones = {1, 1, 0};  // a dropped choice's id is checked all the same
  REQUIRE_THAT(load.add(0, bad.data(), ones.data(), bad.size()), Catch::Contains("expert 8 (choice 1 of layer 0)"));
  const std::vector<int32_t> negative = {-1};
  REQUIRE_THAT(load.add(2, negative.data(), ones.data(), 1), Catch::Contains("expert -1"));
  REQUIRE_THAT(load.add(3, bad.data(), ones.data(), 1), Catch::Contains("layer 3 of a model of 3"));
  REQUIRE(load.totals(0) == want[0]);  // nothing of a refused call counted

  REQUIRE(ExpertLoad::imbalance({}) == 0);
  REQUIRE(ExpertLoad::imbalance({0, 0, 0, 0}) == 0);
  REQUIRE(ExpertLoad::imbalance({5, 5, 5, 5}) == Approx(1.0));
  REQUIRE(ExpertLoad::imbalance({8, 0, 0, 0}) == Approx(4.0));
  REQUIRE(ExpertLoad::imbalance({6, 2, 2, 2}) == Approx(2.0));  // 6 over a mean of 3
}

}  // namespace expert_load_tests
