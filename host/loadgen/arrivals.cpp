#include "loadgen/arrivals.hpp"

#include <cmath>
#include <stdexcept>

namespace tokenhost::loadgen {

PoissonArrivals::PoissonArrivals(double rate, uint64_t seed) : rng_(seed), gap_(rate > 0 ? rate : 1.0) {
  if (!(rate > 0) || !std::isfinite(rate)) throw std::invalid_argument("arrival rate must be a positive number of requests per second");
}

double PoissonArrivals::next_gap() { return gap_(rng_); }

double PoissonArrivals::next_time() {
  t_ += next_gap();
  return t_;
}

}  // namespace tokenhost::loadgen
