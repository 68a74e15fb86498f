// Captures the host's log lines while it lives, for tests that assert what the log says (or does not).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

namespace tokenhost::testing {

// The lines at `level` and up (the last 4096), the logger's level set to it meanwhile.
struct CapturedLog {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  spdlog::level::level_enum before = spdlog::default_logger()->level();
  explicit CapturedLog(spdlog::level::level_enum level = spdlog::level::debug) {
    sink->set_level(level);
    spdlog::default_logger()->sinks().push_back(sink);
    spdlog::set_level(std::min(level, before));
  }
  ~CapturedLog() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
    spdlog::set_level(before);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  // The lines captured so far that contain every one of `parts`.
  std::vector<std::string> lines_with(std::initializer_list<std::string> parts) {
    std::vector<std::string> out;
    for (const auto& line : sink->last_formatted()) {
      bool all = true;
      for (const auto& p : parts) all = all && line.find(p) != std::string::npos;
      if (all) out.push_back(line);
    }
    return out;
  }
};

}  // namespace tokenhost::testing
