// The median the benchmarks report of their runs: the upper middle of an even count, 0 of none.
#pragma once

#include <algorithm>
#include <vector>

namespace tokenhost::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace tokenhost::bench
