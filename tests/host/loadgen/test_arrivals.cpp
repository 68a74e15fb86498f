// Poisson arrivals: over many gaps the mean is 1/rate and the spread that of an exponential; counts in
// unit windows have the mean and variance of a Poisson variable. Bounds are about 6 standard errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "harness.hpp"
#include "loadgen/arrivals.hpp"

namespace loadgen_arrivals_tests {

using namespace tokenhost::loadgen;
using tokenhost::testing::fresh_rng;

TEST_CASE("loadgen: Poisson arrivals have the requested mean rate", "[loadgen]") {
  auto rng = fresh_rng("loadgen poisson");
  for (double rate : {0.5, 4.0, 37.0, std::uniform_real_distribution<double>(1.0, 1000.0)(rng)}) {
    PoissonArrivals arrivals(rate, rng());
    const int n = 50000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      double g = arrivals.next_gap();
      REQUIRE(g >= 0);
      sum += g;
      sq += g * g;
    }
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    INFO("rate " << rate << ": mean gap " << mean << ", sd " << sd);
    // The mean of n exponential gaps has standard error (1/rate)/sqrt(n).
    CHECK(std::abs(mean * rate - 1.0) < 6.0 / std::sqrt(double(n)));
    // An exponential's standard deviation equals its mean (coefficient of variation 1).
    CHECK(std::abs(sd / mean - 1.0) < 0.05);
  }
}

TEST_CASE("loadgen: Poisson arrival counts per window have the mean and variance of a Poisson variable", "[loadgen]") {
  auto rng = fresh_rng("loadgen poisson counts");
  const double rate = std::uniform_real_distribution<double>(5.0, 50.0)(rng);
  PoissonArrivals arrivals(rate, rng());
  const int windows = 4000;
  std::vector<int> counts(windows, 0);
  double last = 0;
  for (;;) {
    double t = arrivals.next_time();
    REQUIRE(t >= last);
    last = t;
    if (t >= windows) break;
    ++counts[size_t(t)];
  }
  double sum = 0, sq = 0;
  for (int c : counts) {
    sum += c;
    sq += double(c) * c;
  }
  const double mean = sum / windows, var = sq / windows - mean * mean;
  INFO("rate " << rate << ": mean count " << mean << ", variance " << var);
  CHECK(std::abs(mean - rate) < 6 * std::sqrt(rate / windows));
  // The sample variance of a Poisson(rate) count has standard error about rate * sqrt(2 / windows).
  CHECK(std::abs(var - rate) < 6 * rate * std::sqrt(2.0 / windows) + 0.1);
}

TEST_CASE("loadgen: the same seed gives the same arrivals, and a bad rate is refused", "[loadgen]") {
  PoissonArrivals a(10, 42), b(10, 42);
  for (int i = 0; i < 100; ++i) CHECK(a.next_time() == b.next_time());
  CHECK_THROWS_AS(PoissonArrivals(0, 1), std::invalid_argument);
  CHECK_THROWS_AS(PoissonArrivals(-3, 1), std::invalid_argument);
}

}  // namespace loadgen_arrivals_tests
