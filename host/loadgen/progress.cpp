#include "loadgen/progress.hpp"

#include <algorithm>
#include <chrono>

namespace tokenhost::loadgen {

ProgressDisplay::ProgressDisplay(const LiveCounters& live, uint64_t total, double duration_s, uint32_t warmup, bool tty,
                                 std::FILE* out)
    : live_(live), total_(total), duration_s_(duration_s), warmup_(warmup), tty_(tty), out_(out) {
  thread_ = std::thread([this] { loop(); });
}

ProgressDisplay::~ProgressDisplay() { stop(); }

void ProgressDisplay::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  draw(true);
}

void ProgressDisplay::loop() {
  const auto interval = tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000);
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stopping_; })) draw(false);
}

std::string ProgressDisplay::line(uint64_t done, uint64_t failed, uint64_t total, double elapsed_s, double duration_s,
                                  double tokens_per_s, bool tty) {
  char buf[256];
  std::string out;
  if (tty && (total > 0 || duration_s > 0)) {
    double frac = total > 0 ? double(done) / double(total) : elapsed_s / duration_s;
    if (total > 0 && duration_s > 0) frac = std::max(frac, elapsed_s / duration_s);
    frac = std::min(1.0, std::max(0.0, frac));
    const int width = 24, filled = int(frac * width + 0.5);
    out = "[" + std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.') + "] ";
  }
  if (total > 0)
    std::snprintf(buf, sizeof buf, "%llu/%llu requests", (unsigned long long)done, (unsigned long long)total);
  else
    std::snprintf(buf, sizeof buf, "%llu requests", (unsigned long long)done);
  out += buf;
  if (failed > 0) out += " (" + std::to_string(failed) + " failed)";
  if (duration_s > 0)
    std::snprintf(buf, sizeof buf, ", %.1f/%.0f s", elapsed_s, duration_s);
  else
    std::snprintf(buf, sizeof buf, ", %.1f s", elapsed_s);
  out += buf;
  std::snprintf(buf, sizeof buf, ", %.1f tokens/s", tokens_per_s);
  out += buf;
  return out;
}

void ProgressDisplay::draw(bool last) {
  const bool warming = live_.warming.load();
  const auto now_ns = std::chrono::steady_clock::now().time_since_epoch();
  const double elapsed =
      std::max(0.0, std::chrono::duration<double>(now_ns - std::chrono::nanoseconds(live_.started_ns.load())).count());
  const uint64_t tokens = live_.tokens.load();
  if (warming != was_warming_ || (!samples_.empty() && (elapsed < samples_.back().first || tokens < samples_.back().second))) {
    samples_.clear();  // a new phase
    was_warming_ = warming;
  }
  if (samples_.empty()) samples_.emplace_back(0.0, 0);  // the counters start at 0 with each phase
  samples_.emplace_back(elapsed, tokens);
  const double window = tty_ ? 3.0 : 10.0;
  while (samples_.size() > 2 && elapsed - samples_[1].first >= window) samples_.pop_front();
  const auto& [t0, n0] = samples_.front();
  const double rate = elapsed - t0 > 0.1 ? double(tokens - n0) / (elapsed - t0) : 0.0;
  std::string text = warming ? "warmup " + std::to_string(live_.done.load()) + "/" + std::to_string(warmup_) + " requests"
                             : line(live_.done.load(), live_.failed.load(), total_, elapsed, duration_s_, rate, tty_);
  if (tty_)
    std::fprintf(out_, "\r\033[K%s%s", text.c_str(), last ? "\n" : "");
  else
    std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

}  // namespace tokenhost::loadgen
