// Open-loop arrivals: a Poisson process of a given rate, i.e. independent exponential gaps with mean
// 1/rate seconds.
#pragma once

#include <cstdint>
#include <random>

namespace tokenhost::loadgen {

class PoissonArrivals {
 public:
  // rate: requests per second, > 0 (throws std::invalid_argument otherwise).
  PoissonArrivals(double rate, uint64_t seed);
  // Seconds from the previous arrival to the next one.
  double next_gap();
  // Seconds from the start to the next arrival (the running sum of the gaps).
  double next_time();

 private:
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
  double t_ = 0;
};

}  // namespace tokenhost::loadgen
