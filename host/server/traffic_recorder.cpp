#include "server/traffic_recorder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace tokenhost {

TrafficRecorder::TrafficRecorder(const std::string& path, bool keep_text) : path_(path), keep_text_(keep_text) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) throw std::runtime_error("record_traffic: cannot write " + path + ": " + std::strerror(errno));
  spdlog::info("recording the traffic to {} (a JSON line per request{})", path, keep_text ? ", prompts' text included" : ", no text");
}

TrafficRecorder::~TrafficRecorder() {
  if (fd_ >= 0) ::close(fd_);
}

nlohmann::json TrafficRecorder::line(const RecordedRequest& r, std::chrono::steady_clock::time_point start, bool keep_text) {
  nlohmann::json j = {{"t", std::chrono::duration<double>(r.arrival - start).count()},
                      {"route", r.route},
                      {"model", r.model},
                      {"stream", r.stream},
                      {"n", r.n},
                      {"prompt_tokens", r.prompt_tokens},
                      {"max_tokens", r.max_tokens},
                      {"completion_tokens", r.completion_tokens},
                      {"outcome", r.outcome},
                      {"ms", r.ms}};
  if (keep_text) j["prompts"] = r.prompts;
  return j;
}

void TrafficRecorder::record(const RecordedRequest& r) {
  const std::string text = line(r, start_, keep_text_).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mu_);
  const ssize_t n = ::write(fd_, text.data(), text.size());
  if (n != ssize_t(text.size()) && !warned_) {
    warned_ = true;
    spdlog::warn("record_traffic: writing {} failed ({}): requests go on unrecorded", path_, n < 0 ? std::strerror(errno) : "a short write");
  }
}

}  // namespace tokenhost
