// Waiting in tests for something another thread makes true, without a fixed sleep.
#pragma once

#include <chrono>
#include <thread>

namespace tokenhost::testing {

// Polls done() every 2 ms until it holds (true) or `within` has passed (false).
template <class Done>
bool eventually(Done done, std::chrono::milliseconds within = std::chrono::seconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace tokenhost::testing
