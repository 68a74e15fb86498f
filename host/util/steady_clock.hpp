// Nanoseconds on the steady clock: the one timestamp the host's parts compare (swap latencies, an
// engine's step times, how long a connection has waited for a request).
#pragma once

#include <chrono>
#include <cstdint>

namespace tokenhost {

inline uint64_t steady_now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace tokenhost
