// ExpertPartitions (plugin/expert_partitions.hpp): an MoE layer's experts() over two compute partitions
// at once gives what one call gives (within float rounding: a token's products are summed per partition
// first), with replicas too, and both partitions compute;
// a partition's failure fails the call naming it, out unwritten; rebalance() applies moe.eplb's plan
// (lower imbalance on a skewed load), a by-device answer (moe.topk), and keeps the placement when a
// plugin answers devices the engine does not have.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "harness.hpp"
#include "moe_experts.hpp"
#include "plugin/expert_partitions.hpp"

namespace expert_partitions_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kDim = 32, kFfn = 48, kExperts = 8;

std::unique_ptr<ExpertPartitions> two_partitions(uint32_t slots) {
  std::vector<std::shared_ptr<ComputePool>> pools{std::make_shared<ComputePool>(1), std::make_shared<ComputePool>(1)};
  return std::make_unique<ExpertPartitions>(pools, std::vector<std::string>{"p0", "p1"}, 2, kExperts, slots);
}

struct Layer {
  std::vector<Expert> experts;
  std::vector<th_moe_expert_weights> views;
  explicit Layer(std::mt19937_64& rng) {
    for (uint32_t e = 0; e < kExperts; ++e) experts.emplace_back(rng, kDim, kFfn);
    for (const Expert& e : experts) views.push_back(e.view());
  }
};

// n_tokens random tokens, k distinct random experts each with random weights (some 0: dropped).
struct Choices {
  std::vector<float> x, w;
  std::vector<int32_t> ids;
  Choices(std::mt19937_64& rng, uint32_t n_tokens, uint32_t k) : x(random_floats(rng, size_t(n_tokens) * kDim, 1.0f)) {
    for (uint32_t t = 0; t < n_tokens; ++t) {
      std::vector<int32_t> all(kExperts);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      for (uint32_t j = 0; j < k; ++j) {
        ids.push_back(all[j]);
        w.push_back(rng() % 7 == 0 ? 0.0f : std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
      }
    }
  }
  th_moe_experts_args args(const Layer& l, uint32_t layer, uint32_t k, float* out) const {
    return {sizeof(th_moe_experts_args), layer, uint32_t(x.size() / kDim), kDim, kFfn, kExperts, k, x.data(), ids.data(), w.data(),
            l.views.data(), nullptr, out};
  }
};

}  // namespace

TEST_CASE("expert partitions: experts() over two partitions gives one call's result, replicas too", "[moe][expert_partitions]") {
  auto rng = fresh_rng("expert partitions");
  const ModelSpec model = model_spec(4, 2, 8, 2, kExperts, 2);
  auto moe = make_plugin("moe.topk", model);
  auto parts = two_partitions(5);
  const Layer layer(rng);
  for (uint32_t k : {2u, 3u}) {
    for (bool replicas : {false, true}) {
      if (replicas) REQUIRE(parts->placement().set_slots(1, {0, 1, 5, 7, 2, 0, 3, 4, 6, 7}).empty());  // 0 and 7 twice
      const Choices c(rng, 29, k);
      std::vector<float> one(c.x.size(), NAN), over(c.x.size(), NAN);
      th_moe_experts_args a = c.args(layer, replicas ? 1 : 0, k, one.data());
      th_error err;
      REQUIRE(moe->call(&th_moe_vtable::experts, "experts", moe->handle(), &a, &err) == TH_OK);
      a.out = over.data();
      const std::vector<double> before = parts->total_seconds();
      parts->experts(*moe, a);
      for (size_t i = 0; i < one.size(); ++i) {
        INFO("k " << k << " replicas " << replicas << " token " << i / kDim << " element " << i % kDim);
        REQUIRE(std::abs(over[i] - one[i]) <= 1e-6f * (1.0f + std::abs(one[i])));  // the sum's order differs
      }
      for (size_t p = 0; p < 2; ++p) CHECK(parts->total_seconds()[p] > before[p]);  // both computed
    }
  }
  CHECK(parts->take_seconds(0)[0] > 0);
  CHECK(parts->take_seconds(0)[0] == 0);  // taken once
}

TEST_CASE("expert partitions: a partition whose experts() fails fails the call naming it, out unwritten", "[moe][expert_partitions]") {
  auto rng = fresh_rng("expert partitions failure");
  auto moe = make_plugin("moe.topk", model_spec(4, 2, 8, 2, kExperts, 2));
  auto parts = two_partitions(4);
  Layer layer(rng);
  layer.views[6].gate.data = nullptr;  // expert 6 lives on partition p1
  const Choices c(rng, 9, 2);
  std::vector<float> out(c.x.size(), NAN);
  const th_moe_experts_args a = c.args(layer, 0, 2, out.data());
  REQUIRE_THROWS_WITH(parts->experts(*moe, a), Contains("expert 6 gate has no data") && Contains("(expert partition p"));
  for (float v : out) REQUIRE(std::isnan(v));
}

TEST_CASE("expert partitions: rebalance() applies a checked placement and keeps the old one when the answer is wrong", "[moe][expert_partitions]") {
  const ModelSpec model = model_spec(4, 2, 8, 2, kExperts, 2);
  const std::vector<uint64_t> skewed{900, 500, 300, 200, 40, 30, 20, 10};  // experts 0-3 (partition p0) carry 95%
  {
    auto moe = make_plugin("moe.eplb", model, toml::table{{"min_improvement", 0.0}});
    auto parts = two_partitions(5);  // 2 spare slots: replicas
    const RebalanceOutcome r = parts->rebalance(*moe, 1, skewed);
    INFO(r.error);
    REQUIRE(r.called);
    REQUIRE(r.error.empty());
    REQUIRE(r.changed);
    CHECK(r.imbalance_before == Approx(1900.0 * 2 / 2000));
    CHECK(r.imbalance_after < 1.05);
    int replicas_of_0 = 0;
    for (int32_t e : parts->placement().slots(1)) replicas_of_0 += e == 0;
    CHECK(replicas_of_0 == 2);  // the hottest expert on both partitions
    CHECK(parts->placement().slots(0) == std::vector<int32_t>{0, 1, 2, 3, -1, 4, 5, 6, 7, -1});  // layer 0 as it started
    // The same load again: already balanced, nothing changes.
    const RebalanceOutcome again = parts->rebalance(*moe, 1, skewed);
    CHECK(again.error.empty());
    CHECK_FALSE(again.changed);
  }
  {
    auto moe = make_plugin("moe.topk", model);  // answers by device (LPT): no replicas
    auto parts = two_partitions(4);
    const RebalanceOutcome r = parts->rebalance(*moe, 0, skewed);
    REQUIRE(r.error.empty());
    REQUIRE(r.changed);
    CHECK(r.imbalance_after < r.imbalance_before);
  }
  {
    PluginCatalog catalog({fixture_dir() + "/moe_bad_rebalance"});
    catalog.scan();
    auto moe = instantiate(catalog, "moe.bad_rebalance", "test", model, {});
    auto parts = two_partitions(4);
    const std::vector<int32_t> start = parts->placement().slots(0);
    const RebalanceOutcome r = parts->rebalance(*moe, 0, skewed);
    CHECK_THAT(r.error, Contains("moe.bad_rebalance rebalance answered a placement the engine refuses: expert 0 placed on device 2 of 2"));
    CHECK_FALSE(r.changed);
    CHECK(parts->placement().slots(0) == start);
  }
}

}  // namespace expert_partitions_tests
