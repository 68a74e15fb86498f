#include "api/stop_strings.hpp"

#include <algorithm>

namespace tokenhost::api {

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Bytes in the sequence a lead byte starts; 0 for bytes that cannot start one.
size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t incomplete_utf8_suffix(std::string_view text) {
  size_t n = text.size();
  // The lead byte of a 4-byte sequence is at most 3 bytes before the end if the sequence is unfinished.
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    auto c = static_cast<unsigned char>(text[n - back]);
    if (is_continuation(c)) continue;
    size_t len = sequence_length(c);
    return len > back ? back : 0;
  }
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Output StopMatcher::feed(std::string_view piece) {
  Output out;
  if (stopped_) return out;
  pending_.append(piece);

  // The earliest completed stop string. Nothing already released can start one (see the hold-back
  // below), so a search of the pending text alone finds the first stop of the whole output.
  size_t best = std::string::npos;
  const std::string* hit = nullptr;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s);
    if (at < best) best = at, hit = &s;
  }
  if (hit) {
    out.text = pending_.substr(0, best);
    out.stopped = stopped_ = true;
    out.stop = *hit;
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string: any stop that starts
  // earlier would already have been found complete, so everything before it is safe.
  size_t keep = 0;
  for (const auto& s : stops_) {
    size_t longest = std::min(s.size() - 1, pending_.size());
    for (size_t len = longest; len > keep; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  size_t release = pending_.size() - keep;
  release -= incomplete_utf8_suffix(std::string_view(pending_).substr(0, release));
  out.text = pending_.substr(0, release);
  pending_.erase(0, release);
  return out;
}

std::string StopMatcher::finish() {
  std::string rest;
  if (!stopped_) rest.swap(pending_);
  pending_.clear();
  return rest;
}

}  // namespace tokenhost::api
