#include "loadgen/sse.hpp"

namespace tokenhost::loadgen {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      line_done();
    } else {
      line_ += c;
    }
  }
}

void SseParser::finish() {
  if (!line_.empty()) line_done();
  dispatch();
  after_cr_ = false;
}

void SseParser::line_done() {
  if (line_.empty()) {
    dispatch();
    return;
  }
  std::string_view line = line_;
  if (line.front() != ':') {
    auto colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

void SseParser::dispatch() {
  if (has_data_) {
    std::string data = std::move(data_);
    data_.clear();
    has_data_ = false;
    on_data_(data);
  }
}

}  // namespace tokenhost::loadgen
