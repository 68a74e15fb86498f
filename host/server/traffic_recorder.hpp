// A server's real traffic, recorded for `tokenhost bench --replay` ([server] record_traffic, `serve
// --record FILE`): one JSON line per request the gateway finished, appended whole (one write call to a
// file opened for appending: a reader or a crash never sees half a line):
//
//   {"t": seconds from the recording's start to the request's arrival, "route": "completions" | "chat" |
//    "generate", "model", "stream", "n" (choices per prompt), "prompt_tokens": [per prompt],
//    "max_tokens": [per prompt], "completion_tokens": [per choice], "outcome": "ok" | "error" | ...,
//    "ms": its duration, and with record_text "prompts": [the prompts' text]}
//
// No text unless asked: lengths and times say how a load is shaped without what users wrote.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenhost {

struct RecordedRequest {
  std::chrono::steady_clock::time_point arrival;
  std::string route, model;
  bool stream = false;
  int64_t n = 1;
  std::vector<int64_t> prompt_tokens, max_tokens, completion_tokens;
  std::string outcome;
  double ms = 0;
  std::vector<std::string> prompts;  // written only when the recorder keeps text
};

class TrafficRecorder {
 public:
  // Opens path for appending (created when absent). Throws std::runtime_error naming the path when it
  // cannot be written.
  TrafficRecorder(const std::string& path, bool keep_text);
  ~TrafficRecorder();
  TrafficRecorder(const TrafficRecorder&) = delete;
  TrafficRecorder& operator=(const TrafficRecorder&) = delete;

  bool keeps_text() const { return keep_text_; }
  const std::string& path() const { return path_; }
  // Appends the request's line; a failed write is logged once and the server goes on.
  void record(const RecordedRequest& r);
  static nlohmann::json line(const RecordedRequest& r, std::chrono::steady_clock::time_point start, bool keep_text);

 private:
  std::string path_;
  bool keep_text_;
  int fd_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  bool warned_ = false;
};

}  // namespace tokenhost
