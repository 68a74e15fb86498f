// router.round_robin: rotation order, unhealthy candidates skipped with equal shares for the others,
// all unhealthy refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "../router_under_test.hpp"

namespace router_round_robin_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

struct Router : RouterUnderTest {
  explicit Router(uint32_t n) : RouterUnderTest("router.round_robin", n) {}
};

}  // namespace

TEST_CASE("router.round_robin rotates through the candidates in order", "[router][round_robin]") {
  for (uint32_t n : {1u, 2u, 3u, 5u}) {
    Router r(n);
    for (uint32_t call = 0; call < 4 * n + 1; ++call) {
      INFO("n " << n << " call " << call);
      REQUIRE(r.next() == call % n);
    }
  }
}

TEST_CASE("router.round_robin skips unhealthy candidates and shares equally among the rest", "[router][round_robin]") {
  SECTION("a fixed case: 1 of 4 down") {
    Router r(4);
    r.candidates[1].healthy = 0;
    std::vector<uint32_t> seen;
    for (int i = 0; i < 6; ++i) seen.push_back(r.next());
    CHECK(seen == std::vector<uint32_t>{0, 2, 3, 0, 2, 3});
  }
  SECTION("random health patterns") {
    auto rng = fresh_rng("router.round_robin health");
    for (int trial = 0; trial < 50; ++trial) {
      const uint32_t n = std::uniform_int_distribution<uint32_t>(2, 8)(rng);
      Router r(n);
      uint32_t healthy = 0;
      for (auto& c : r.candidates) healthy += (c.healthy = int32_t(rng() % 3 != 0));
      if (healthy == 0) r.candidates[rng() % n].healthy = 1, healthy = 1;
      // Some calls first, then the health changes: the new healthy set shares equally from then on.
      for (int i = 0; i < int(rng() % 5); ++i) r.next();
      std::vector<uint32_t> count(n, 0);
      const uint32_t calls = 60 * healthy + uint32_t(rng() % healthy);
      for (uint32_t i = 0; i < calls; ++i) ++count[r.next()];
      uint32_t lo = UINT32_MAX, hi = 0;
      for (uint32_t i = 0; i < n; ++i) {
        INFO("trial " << trial << " candidate " << i << " healthy " << r.candidates[i].healthy << " count " << count[i]);
        if (r.candidates[i].healthy == 0) {
          REQUIRE(count[i] == 0);
        } else {
          lo = std::min(lo, count[i]);
          hi = std::max(hi, count[i]);
        }
      }
      INFO("trial " << trial << " healthy " << healthy << " shares " << lo << ".." << hi);
      REQUIRE(hi - lo <= 1);
      REQUIRE(lo >= 60);
    }
  }
}

TEST_CASE("router.round_robin with no healthy candidate is TH_ERR_UNSUPPORTED", "[router][round_robin]") {
  Router r(3);
  for (auto& c : r.candidates) c.healthy = 0;
  th_route_decision d;
  CHECK(r.route(d) == TH_ERR_UNSUPPORTED);
  CHECK(r.last_error == "no healthy engine among 3 candidates");
  // One back up: it is chosen again and again.
  r.candidates[2].healthy = 1;
  for (int i = 0; i < 4; ++i) CHECK(r.next() == 2);
}

}  // namespace router_round_robin_tests
