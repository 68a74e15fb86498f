// A progress display for a run: requests done / total, elapsed seconds and the current output
// tokens/s (over the last 3 seconds, or 10 when not on a terminal). On a terminal it redraws one line four times a second;
// otherwise it writes a line every 5 seconds.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "loadgen/runner.hpp"

namespace tokenhost::loadgen {

class ProgressDisplay {
 public:
  // total: measured requests (0: unknown); duration_s: 0 when not bounded by time.
  ProgressDisplay(const LiveCounters& live, uint64_t total, double duration_s, uint32_t warmup, bool tty,
                  std::FILE* out = stderr);
  ~ProgressDisplay();
  void stop();  // writes the last line; idempotent

  // The text of one progress line (no line ending).
  static std::string line(uint64_t done, uint64_t failed, uint64_t total, double elapsed_s, double duration_s,
                          double tokens_per_s, bool tty);

 private:
  void loop();
  void draw(bool last);

  const LiveCounters& live_;
  uint64_t total_;
  double duration_s_;
  uint32_t warmup_;
  bool tty_;
  std::FILE* out_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
  // (elapsed seconds, tokens) samples of the last few seconds, for the current rate
  std::deque<std::pair<double, uint64_t>> samples_;
  bool was_warming_ = false;
};

}  // namespace tokenhost::loadgen
