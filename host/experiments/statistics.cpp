#include "experiments/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/stats.hpp"

namespace tokenhost::experiments {
namespace {

// The continued fraction of the regularized incomplete beta function (modified Lentz's method), valid
// for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1.0 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-15) break;
  }
  return h;
}

// I_x(a, b).
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
  return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

// The x where the increasing function f crosses q, by bisection over [lo, hi] (expanded as needed).
template <class F>
double invert(F f, double q, double lo, double hi) {
  while (f(lo) > q) lo *= 2;
  while (f(hi) < q) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-14 * std::max(1.0, std::fabs(lo)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (f(mid) < q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  // P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2).
  const double tail = 0.5 * incomplete_beta(0.5 * df, 0.5, df / (df + t * t));
  return t > 0 ? 1.0 - tail : tail;
}

double student_t_quantile(double q, double df) {
  if (!(q > 0 && q < 1) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (q == 0.5) return 0;
  return invert([df](double t) { return student_t_cdf(t, df); }, q, -1.0, 1.0);
}

double normal_quantile(double q) {
  if (!(q > 0 && q < 1)) return std::numeric_limits<double>::quiet_NaN();
  return invert([](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }, q, -1.0, 1.0);
}

void Sample::add(double x) {
  ++n_;
  const double delta = x - mean_;
  mean_ += delta / double(n_);
  m2_ += delta * (x - mean_);
  if (kept_.size() < capacity_) {
    kept_.push_back(x);
    return;
  }
  // Reservoir sampling (Algorithm R): the k-th value replaces a kept one with probability capacity / k.
  rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
  const uint64_t j = (rng_ >> 11) % n_;
  if (j < capacity_) kept_[j] = x;
}

double Sample::percentile(double p) const {
  std::vector<double> sorted = kept_;
  std::sort(sorted.begin(), sorted.end());
  return loadgen::percentile_sorted(sorted, p);
}

Summary summarize(const Sample& s) {
  Summary out;
  out.n = s.n();
  out.mean = s.mean();
  if (s.n() >= 2) {
    const double half = student_t_quantile(0.975, double(s.n() - 1)) * std::sqrt(s.variance() / double(s.n()));
    out.ci95 = std::make_pair(out.mean - half, out.mean + half);
  }
  out.p50 = s.percentile(50);
  out.p99 = s.percentile(99);
  return out;
}

Comparison welch(const Sample& a, const Sample& b, uint32_t min_samples) {
  Comparison c;
  c.diff = b.mean() - a.mean();
  c.ratio = a.mean() != 0 ? b.mean() / a.mean() : 0.0;
  c.enough = a.n() >= min_samples && b.n() >= min_samples && a.n() >= 2 && b.n() >= 2;
  if (a.n() < 2 || b.n() < 2) {
    c.ci_lo = -std::numeric_limits<double>::infinity();
    c.ci_hi = std::numeric_limits<double>::infinity();
    return c;
  }
  const double va = a.variance() / double(a.n()), vb = b.variance() / double(b.n());
  const double se = std::sqrt(va + vb);
  if (se == 0) {
    // Both arms constant: they differ or they do not, with certainty.
    c.p_value = c.diff == 0 ? 1.0 : 0.0;
    c.df = double(a.n() + b.n() - 2);
    c.ci_lo = c.ci_hi = c.diff;
  } else {
    c.df = (va + vb) * (va + vb) / (va * va / double(a.n() - 1) + vb * vb / double(b.n() - 1));
    c.t = c.diff / se;
    c.p_value = std::min(1.0, 2.0 * student_t_cdf(-std::fabs(c.t), c.df));
    const double half = student_t_quantile(0.975, c.df) * se;
    c.ci_lo = c.diff - half;
    c.ci_hi = c.diff + half;
  }
  c.significant = c.enough && c.p_value < 0.05;
  if (!c.significant && c.diff != 0) {
    // n per arm for a two-sided 5% test with 80% power: (z_0.975 + z_0.8)^2 (s_a^2 + s_b^2) / diff^2.
    const double z = normal_quantile(0.975) + normal_quantile(0.8);
    const double n = z * z * (a.variance() + b.variance()) / (c.diff * c.diff);
    c.needed_per_arm = uint64_t(std::ceil(std::max<double>(n, min_samples)));
  }
  return c;
}

}  // namespace tokenhost::experiments
