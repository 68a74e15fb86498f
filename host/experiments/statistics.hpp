// The statistics of an experiment's report: per-arm sample summaries with t-based 95% confidence
// intervals, and Welch's t-test between two arms.
//
// Why Welch's t-test on means rather than Mann-Whitney: the report states what an operator pays for,
// mean latency (and throughput, which follows from it), with a confidence interval on the difference of
// means; Welch's test is the test that matches that interval (the difference is significant exactly
// when its interval excludes 0) and it does not assume equal variances, which two schedulers do not
// have. Latencies are skewed, but the test is on means of independent requests, which the central limit
// theorem makes close to normal once each arm has a few dozen samples: that is what the minimum sample
// size before any verdict is for. Mann-Whitney would answer another question (is one arm's latency
// stochastically smaller), with no interval on a difference an operator can read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tokenhost::experiments {

// Student's t distribution with df > 0 degrees of freedom (df may be fractional: Welch's df is).
double student_t_cdf(double t, double df);
// The q-quantile (0 < q < 1).
double student_t_quantile(double q, double df);
// The standard normal quantile.
double normal_quantile(double q);

// Observations of one metric on one arm: count, mean and variance over all of them (Welford), and a
// uniform reservoir of at most `reservoir` of them for percentiles, so memory stays bounded on a long
// experiment. Deterministic: the reservoir's random choices come from a fixed seed.
class Sample {
 public:
  explicit Sample(size_t reservoir = 4096) : capacity_(reservoir) {}
  void add(double x);
  uint64_t n() const { return n_; }
  double mean() const { return mean_; }
  double variance() const { return n_ > 1 ? m2_ / double(n_ - 1) : 0.0; }  // unbiased
  // Linear interpolation between closest ranks (NumPy's default) over the reservoir; NaN when empty.
  double percentile(double p) const;

 private:
  size_t capacity_;
  uint64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
  std::vector<double> kept_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ULL;
};

struct Summary {
  uint64_t n = 0;
  double mean = 0;
  std::optional<std::pair<double, double>> ci95;  // mean +- t(0.975, n-1) * s / sqrt(n); none below 2 samples
  double p50 = 0, p99 = 0;
};
Summary summarize(const Sample& s);

// Welch's t-test of candidate against baseline (difference candidate - baseline).
struct Comparison {
  double diff = 0;
  double ratio = 0;  // candidate mean / baseline mean; 0 when the baseline mean is 0
  double ci_lo = 0, ci_hi = 0;  // 95% interval of the difference (Welch-Satterthwaite df)
  double t = 0, df = 0;
  double p_value = 1;  // two-sided
  bool enough = false;       // both arms have at least min_samples
  bool significant = false;  // enough and p_value < 0.05
  // Samples per arm that would make the observed difference significant with 80% power (normal
  // approximation); 0 when the difference is 0 or already significant.
  uint64_t needed_per_arm = 0;
};
Comparison welch(const Sample& baseline, const Sample& candidate, uint32_t min_samples);

}  // namespace tokenhost::experiments
