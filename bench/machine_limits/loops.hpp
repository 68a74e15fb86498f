// What bench_machine_limits' loops (limits.cpp, kernel_mix.cpp) share: their timing, and the macros that
// write out their accumulators.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

// Twelve (or eight) accumulators as separate variables, each step written out: an array of them
// would live in memory, and a load and a store around each instruction would measure store
// forwarding instead.
#define TH_EACH12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TH_EACH8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

namespace tokenhost::bench::timing {

using clock_type = std::chrono::steady_clock;

// Results land here, so that no loop is optimized away.
extern volatile int64_t sink;

// Whether `seconds` have not yet passed since `started`.
inline bool running(clock_type::time_point started, double seconds) {
  return std::chrono::duration<double>(clock_type::now() - started).count() < seconds;
}

// `threads` copies of body(seconds) at once, started together; the sum of what they return (their
// multiply-adds or bytes) over the slowest one's time.
double rate(size_t threads, double seconds, const std::function<double(double)>& body);

// The median of `runs` calls of f.
double median_of(int runs, const std::function<double()>& f);

}  // namespace tokenhost::bench::timing
