// router.prefix_affinity: the cheapest candidate by prefill left and load (checked against the cost
// computed here on random requests), ties to the least loaded then in rotation, a session held while
// its engine is not too busy, each weight alone, no cached_tokens array, unhealthy candidates, config.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../router_under_test.hpp"

namespace router_prefix_affinity_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

constexpr const char* kId = "router.prefix_affinity";

struct Router : RouterUnderTest {
  explicit Router(uint32_t n, const toml::table& config = {}) : RouterUnderTest(kId, n, config) {}
};

}  // namespace

TEST_CASE("router.prefix_affinity picks the candidate with the least prefill and load", "[router][prefix_affinity]") {
  auto rng = fresh_rng("router.prefix_affinity cost");
  for (int trial = 0; trial < 200; ++trial) {
    const double prefill = std::uniform_real_distribution<double>(0.0, 4.0)(rng);
    const double load = std::uniform_real_distribution<double>(0.0, 200.0)(rng);
    const uint32_t n = std::uniform_int_distribution<uint32_t>(1, 8)(rng);
    Router r(n, toml::table{{"prefill_weight", prefill}, {"load_weight", load}});
    for (int call = 0; call < 5; ++call) {
      r.n_tokens = std::uniform_int_distribution<uint32_t>(1, 2000)(rng);
      uint32_t healthy = 0;
      for (uint32_t i = 0; i < n; ++i) {
        r.candidates[i].running = std::uniform_int_distribution<uint32_t>(0, 20)(rng);
        r.candidates[i].healthy = int32_t(rng() % 4 != 0);
        healthy += uint32_t(r.candidates[i].healthy);
        r.cached[i] = rng() % 3 == 0 ? 0 : std::uniform_int_distribution<uint32_t>(0, r.n_tokens - 1)(rng) / 16 * 16;
      }
      if (healthy == 0) r.candidates[rng() % n].healthy = 1;
      // The cost of each candidate, in plain arithmetic; the pick must be a cheapest healthy one, and
      // among the cheapest one with the fewest requests in flight.
      std::vector<double> cost(n);
      double lowest = 1e300;
      for (uint32_t i = 0; i < n; ++i) {
        cost[i] = prefill * double(r.n_tokens - r.cached[i]) + load * double(r.candidates[i].running);
        if (r.candidates[i].healthy) lowest = std::min(lowest, cost[i]);
      }
      uint32_t fewest = UINT32_MAX;
      for (uint32_t i = 0; i < n; ++i)
        if (r.candidates[i].healthy && cost[i] == lowest) fewest = std::min(fewest, r.candidates[i].running);
      const uint32_t t = r.next();
      INFO("trial " << trial << " call " << call << " picked " << t << " cost " << cost[t] << " lowest " << lowest);
      REQUIRE(r.candidates[t].healthy);
      REQUIRE(cost[t] == lowest);
      REQUIRE(r.candidates[t].running == fewest);
    }
  }
}

TEST_CASE("router.prefix_affinity spreads fresh prefixes over idle engines in rotation", "[router][prefix_affinity]") {
  Router r(3);
  r.n_tokens = 100;
  std::vector<uint32_t> seen;
  for (int i = 0; i < 6; ++i) seen.push_back(r.next());
  CHECK(seen == std::vector<uint32_t>{0, 1, 2, 0, 1, 2});
  // The same with every engine holding the same prefix (a shared system prompt).
  r.cached = {64, 64, 64};
  seen.clear();
  for (int i = 0; i < 3; ++i) seen.push_back(r.next());
  CHECK(seen == std::vector<uint32_t>{0, 1, 2});
  // Loaded engines: the least loaded, whatever the rotation.
  r.candidates[0].running = 3, r.candidates[1].running = 1, r.candidates[2].running = 2;
  for (int i = 0; i < 3; ++i) CHECK(r.next() == 1);
}

TEST_CASE("router.prefix_affinity keeps a conversation where its history is until that engine is too busy",
          "[router][prefix_affinity]") {
  Router r(2);  // defaults: 1 per token to prefill, 64 per request in flight
  r.n_tokens = 700;
  r.cached = {0, 640};  // engine1 holds the conversation's first 640 tokens
  // 640 cached tokens outweigh up to 10 more requests in flight (10 x 64 = 640: a tie at 10, which goes
  // to the less loaded engine0).
  for (uint32_t extra = 0; extra < 10; ++extra) {
    r.candidates[1].running = extra;
    INFO("engine1 has " << extra << " more in flight");
    CHECK(r.next() == 1);
  }
  r.candidates[1].running = 10;
  CHECK(r.next() == 0);
  r.candidates[1].running = 11;
  CHECK(r.next() == 0);
}

TEST_CASE("router.prefix_affinity with one weight zero routes by the other alone", "[router][prefix_affinity]") {
  SECTION("load_weight 0: by overlap, ties by load") {
    Router r(3, toml::table{{"load_weight", 0.0}});
    r.n_tokens = 300;
    r.cached = {32, 256, 128};
    r.candidates[1].running = 50;
    CHECK(r.next() == 1);
    r.cached = {0, 0, 0};
    r.candidates[0].running = 2, r.candidates[2].running = 1;
    CHECK(r.next() == 2);
  }
  SECTION("prefill_weight 0: least loaded") {
    Router r(3, toml::table{{"prefill_weight", 0.0}});
    r.n_tokens = 300;
    r.cached = {256, 0, 128};
    r.candidates[0].running = 2, r.candidates[1].running = 1, r.candidates[2].running = 3;
    CHECK(r.next() == 1);
  }
}

TEST_CASE("router.prefix_affinity without cached_tokens routes to the least loaded", "[router][prefix_affinity]") {
  Router r(3);
  r.n_tokens = 500;
  r.cached = {400, 0, 0};  // not passed
  r.pass_cached = false;
  r.candidates[0].running = 2, r.candidates[1].running = 0, r.candidates[2].running = 1;
  CHECK(r.next() == 1);
}

TEST_CASE("router.prefix_affinity skips unhealthy candidates and refuses when none is healthy", "[router][prefix_affinity]") {
  Router r(3);
  r.n_tokens = 500;
  r.cached = {448, 0, 0};
  r.candidates[0].healthy = 0;  // holds the prefix, but a guard marked it down
  r.candidates[2].running = 1;
  CHECK(r.next() == 1);
  for (auto& c : r.candidates) c.healthy = 0;
  th_route_decision d;
  CHECK(r.route(d) == TH_ERR_UNSUPPORTED);
  CHECK(r.last_error == "no healthy engine among 3 candidates");
}

TEST_CASE("router.prefix_affinity refuses weights outside their range", "[router][prefix_affinity]") {
  CHECK_THROWS_WITH(make_plugin(kId, model_spec(), toml::table{{"load_weight", -1.0}}), Catch::Matchers::Contains("load_weight"));
  CHECK_THROWS_WITH(make_plugin(kId, model_spec(), toml::table{{"prefill_weight", "high"}}), Catch::Matchers::Contains("prefill_weight"));
}

}  // namespace router_prefix_affinity_tests
