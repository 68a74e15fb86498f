// Percentiles and summaries of latency samples.
//
// Percentile definition (linear interpolation between closest ranks, NumPy's default "linear"): for
// n sorted values x[0] <= ... <= x[n-1] and p in [0, 100], h = (n - 1) * p / 100 and
//   P(p) = x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])
// so P(0) is the minimum, P(100) the maximum and P(50) the usual median. One value: every percentile
// is that value. No values: NaN.
#pragma once

#include <cstddef>
#include <vector>

namespace tokenhost::loadgen {

// sorted must be in ascending order.
double percentile_sorted(const std::vector<double>& sorted, double p);
double percentile(std::vector<double> values, double p);

struct Summary {
  size_t count = 0;
  double mean = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;  // NaN when count == 0
};

Summary summarize(std::vector<double> values);

}  // namespace tokenhost::loadgen
