// The report's statistics against float64 references: Student's t by numerical integration of its
// density, known table quantiles, confidence interval coverage on simulated normal data, Welch's test
// computed by hand, and no verdict below the minimum sample size.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "experiments/statistics.hpp"

namespace experiments_statistics_tests {

using namespace tokenhost::experiments;

namespace {

// P(T <= t) by Simpson's rule over the density, written out plainly: the reference the incomplete-beta
// implementation is checked against.
double t_cdf_reference(double t, double df) {
  auto density = [df](double x) {
    return std::exp(std::lgamma((df + 1) / 2) - std::lgamma(df / 2)) / std::sqrt(df * M_PI) * std::pow(1 + x * x / df, -(df + 1) / 2);
  };
  // Integrate the density from 0 to |t| and use symmetry: P(T <= t) = 1/2 + sign(t) * integral.
  const double a = 0, b = std::fabs(t);
  const int n = 20000;
  const double h = (b - a) / n;
  double sum = density(a) + density(b);
  for (int i = 1; i < n; ++i) sum += density(a + i * h) * (i % 2 ? 4 : 2);
  const double integral = sum * h / 3;
  return t >= 0 ? 0.5 + integral : 0.5 - integral;
}

}  // namespace

TEST_CASE("statistics: Student's t CDF matches numerical integration of its density", "[experiments][statistics]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> df_dist(1.0, 200.0), t_dist(-8.0, 8.0);
  for (int i = 0; i < 200; ++i) {
    const double df = df_dist(rng), t = t_dist(rng);
    INFO("df " << df << " t " << t);
    REQUIRE(student_t_cdf(t, df) == Approx(t_cdf_reference(t, df)).margin(1e-9));
  }
}

TEST_CASE("statistics: t and normal quantiles match the tables", "[experiments][statistics]") {
  REQUIRE(student_t_quantile(0.975, 1) == Approx(12.7062047361747).epsilon(1e-10));
  REQUIRE(student_t_quantile(0.975, 10) == Approx(2.22813885198627).epsilon(1e-10));
  REQUIRE(student_t_quantile(0.975, 30) == Approx(2.04227245630124).epsilon(1e-10));
  REQUIRE(student_t_quantile(0.025, 30) == Approx(-2.04227245630124).epsilon(1e-10));
  REQUIRE(student_t_quantile(0.95, 5.5) == Approx(1.9735).epsilon(1e-3));  // fractional df, interpolated table
  REQUIRE(normal_quantile(0.975) == Approx(1.959963984540054).epsilon(1e-10));
  REQUIRE(normal_quantile(0.8) == Approx(0.8416212335729143).epsilon(1e-10));
  for (double q : {0.01, 0.3, 0.6, 0.99}) REQUIRE(student_t_cdf(student_t_quantile(q, 7.3), 7.3) == Approx(q).margin(1e-12));
}

TEST_CASE("statistics: the mean, variance and percentiles of a sample match plain loops", "[experiments][statistics]") {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(0.0, 1.0);
  Sample s(100000);
  std::vector<double> xs;
  for (int i = 0; i < 5000; ++i) {
    xs.push_back(d(rng));
    s.add(xs.back());
  }
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= double(xs.size());
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  var /= double(xs.size() - 1);
  REQUIRE(s.mean() == Approx(mean).epsilon(1e-12));
  REQUIRE(s.variance() == Approx(var).epsilon(1e-10));
  std::sort(xs.begin(), xs.end());
  REQUIRE(s.percentile(50) == Approx(0.5 * (xs[2499] + xs[2500])));
  // A bounded reservoir keeps the exact mean and a close median.
  Sample small(512);
  for (double x : xs) small.add(x);
  REQUIRE(small.mean() == Approx(mean).epsilon(1e-12));
  REQUIRE(small.percentile(50) == Approx(xs[2500]).epsilon(0.15));
}

TEST_CASE("statistics: the 95% interval of a mean covers the true mean 95% of the time", "[experiments][statistics]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> d(5.0, 2.0);
  const int trials = 4000;
  int covered = 0;
  for (int t = 0; t < trials; ++t) {
    Sample s;
    for (int i = 0; i < 12; ++i) s.add(d(rng));
    auto m = summarize(s);
    REQUIRE(m.ci95);
    covered += m.ci95->first <= 5.0 && 5.0 <= m.ci95->second;
  }
  const double rate = double(covered) / trials, sd = std::sqrt(0.95 * 0.05 / trials);
  INFO("coverage " << rate);
  REQUIRE(std::fabs(rate - 0.95) < 4 * sd);
}

TEST_CASE("statistics: Welch's test matches the formulas computed by hand", "[experiments][statistics]") {
  std::mt19937_64 rng(9);
  std::normal_distribution<double> da(10.0, 1.0), db(10.6, 3.0);
  Sample a, b;
  std::vector<double> xa, xb;
  for (int i = 0; i < 40; ++i) a.add(xa.emplace_back(da(rng)));
  for (int i = 0; i < 55; ++i) b.add(xb.emplace_back(db(rng)));
  auto stats = [](const std::vector<double>& x) {
    double m = 0, v = 0;
    for (double e : x) m += e;
    m /= double(x.size());
    for (double e : x) v += (e - m) * (e - m);
    return std::pair{m, v / double(x.size() - 1)};
  };
  auto [ma, va] = stats(xa);
  auto [mb, vb] = stats(xb);
  const double sa = va / 40, sb = vb / 55, se = std::sqrt(sa + sb);
  const double df = (sa + sb) * (sa + sb) / (sa * sa / 39 + sb * sb / 54);
  const double t = (mb - ma) / se;
  const double p = 2 * (1 - t_cdf_reference(std::fabs(t), df));
  auto c = welch(a, b, 30);
  REQUIRE(c.diff == Approx(mb - ma).epsilon(1e-12));
  REQUIRE(c.df == Approx(df).epsilon(1e-10));
  REQUIRE(c.t == Approx(t).epsilon(1e-10));
  REQUIRE(c.p_value == Approx(p).margin(1e-9));
  REQUIRE(c.ci_lo == Approx(mb - ma - student_t_quantile(0.975, df) * se));
  REQUIRE(c.ratio == Approx(mb / ma));
  REQUIRE(c.enough);
  REQUIRE(c.significant == (p < 0.05));
  // The interval excludes 0 exactly when the test is significant.
  REQUIRE((c.ci_lo > 0 || c.ci_hi < 0) == (c.p_value < 0.05));
}

TEST_CASE("statistics: no verdict below the minimum sample size, however large the difference", "[experiments][statistics]") {
  Sample a, b;
  for (int i = 0; i < 10; ++i) {
    a.add(1.0 + 0.01 * i);
    b.add(5.0 + 0.01 * i);
  }
  auto c = welch(a, b, 30);
  REQUIRE(c.p_value < 1e-10);
  REQUIRE_FALSE(c.enough);
  REQUIRE_FALSE(c.significant);
  for (int i = 0; i < 20; ++i) {
    a.add(1.0 + 0.01 * i);
    b.add(5.0 + 0.01 * i);
  }
  REQUIRE(welch(a, b, 30).significant);
}

TEST_CASE("statistics: samples needed for a small difference follow the power formula", "[experiments][statistics]") {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> d(0.0, 1.0);
  Sample a, b;
  for (int i = 0; i < 50; ++i) {
    a.add(d(rng));
    b.add(d(rng) + 0.1);
  }
  auto c = welch(a, b, 30);
  REQUIRE_FALSE(c.significant);
  {
    const double z = 1.959963984540054 + 0.8416212335729143;
    const double n = z * z * (a.variance() + b.variance()) / (c.diff * c.diff);
    REQUIRE(c.needed_per_arm == uint64_t(std::ceil(std::max(n, 30.0))));
  }
}

}  // namespace experiments_statistics_tests
