// Percentiles and summaries against a plain reference on fresh random data: the reference finds the
// two closest ranks with std::nth_element on the unsorted values and interpolates between them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "harness.hpp"
#include "util/stats.hpp"

namespace util_stats_tests {

using namespace tokenhost::loadgen;
using tokenhost::testing::fresh_rng;

namespace {

// The value of rank k (0-based) of the values, in ascending order.
double rank(std::vector<double> v, size_t k) {
  std::nth_element(v.begin(), v.begin() + long(k), v.end());
  return v[k];
}

double reference_percentile(const std::vector<double>& v, double p) {
  const double h = double(v.size() - 1) * p / 100.0;
  const size_t lo = size_t(h), hi = std::min(lo + 1, v.size() - 1);
  const double frac = h - double(lo);
  return (1 - frac) * rank(v, lo) + frac * rank(v, hi);
}

}  // namespace

TEST_CASE("loadgen: percentiles match the closest-rank interpolation", "[loadgen]") {
  auto rng = fresh_rng("loadgen percentiles");
  for (int round = 0; round < 200; ++round) {
    const size_t n = std::uniform_int_distribution<size_t>(1, round < 100 ? 12 : 3000)(rng);
    std::vector<double> v(n);
    std::lognormal_distribution<double> d(3.0, 1.0);
    for (auto& x : v) x = d(rng);
    if (round % 3 == 0)  // ties
      for (auto& x : v) x = std::round(x / 10);
    for (double p : {0.0, 50.0, 90.0, 99.0, 100.0, std::uniform_real_distribution<double>(0, 100)(rng)}) {
      const double got = percentile(v, p), want = reference_percentile(v, p);
      INFO("n " << n << ", p " << p);
      REQUIRE(got == Approx(want).epsilon(1e-12).margin(1e-12));
    }
    Summary s = summarize(v);
    REQUIRE(s.count == n);
    REQUIRE(s.min == *std::min_element(v.begin(), v.end()));
    REQUIRE(s.max == *std::max_element(v.begin(), v.end()));
    REQUIRE(s.mean == Approx(std::accumulate(v.begin(), v.end(), 0.0) / double(n)));
    REQUIRE(s.p50 == Approx(reference_percentile(v, 50)));
    REQUIRE(s.p90 == Approx(reference_percentile(v, 90)));
    REQUIRE(s.p99 == Approx(reference_percentile(v, 99)));
  }
}

TEST_CASE("loadgen: percentiles of small and empty sets", "[loadgen]") {
  CHECK(percentile({5.0}, 99) == 5.0);
  CHECK(percentile({1.0, 2.0}, 50) == 1.5);
  CHECK(percentile({4.0, 1.0, 3.0, 2.0}, 50) == 2.5);
  CHECK(percentile({10.0, 20.0, 30.0, 40.0, 50.0}, 90) == Approx(46.0));
  CHECK(percentile({1.0, 2.0, 3.0}, 0) == 1.0);
  CHECK(percentile({1.0, 2.0, 3.0}, 100) == 3.0);
  CHECK(std::isnan(percentile({}, 50)));
  Summary e = summarize({});
  CHECK(e.count == 0);
  CHECK(std::isnan(e.mean));
  CHECK(std::isnan(e.p99));
}

}  // namespace util_stats_tests
