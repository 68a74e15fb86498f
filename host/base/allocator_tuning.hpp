// The process's malloc settings for steady serving. A step allocates and frees the same large blocks
// every time (a 64-row step hands over 64 logit rows of 128 KB; the sampler and the plugins have
// scratch of their own). With glibc's defaults, memory freed at the top of a heap above 128 KiB goes
// back to the system at once, so the next step faults it in again, zeroed; the thresholds move only
// when a large mapped block happens to be freed, so whether a server suffered this depended on what it
// had freed before, down to the length of the path it was started by. Measured on Zen 5 (2 cores,
// 110M Q8_0, 64 streams of 15 + 128 tokens, six alternating servers each, 2026-12-07): 128,000-157,000
// page faults per load and 673-828 output tokens/s without these settings, none after startup and
// 824-1008 tokens/s with them. Memory freed now stays with the process up to kTrimThreshold per heap.
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tokenhost {

// Called once by main() before any thread starts (mallopt is not for concurrent use).
inline void tune_allocator_for_serving() {
#if defined(__GLIBC__)
  constexpr int kMmapThreshold = 32 << 20;   // glibc's largest; blocks below come from the heaps, reused
  constexpr int kTrimThreshold = 256 << 20;  // free memory kept before any is handed back
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
#endif
}

}  // namespace tokenhost
