// An incremental parser for a text/event-stream body (Server-Sent Events) as it arrives in arbitrary
// pieces. Lines end in "\n", "\r\n" or "\r" (a "\r\n" split across two pieces counts once); "data:"
// lines (one optional space after the colon is dropped) accumulate, joined by "\n", and a blank line
// hands the event's data to the callback. Comment lines (":...") and the other fields (event, id,
// retry) are ignored; an event without data lines is not reported.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace tokenhost::loadgen {

class SseParser {
 public:
  using Callback = std::function<void(const std::string& data)>;
  explicit SseParser(Callback on_data) : on_data_(std::move(on_data)) {}

  void feed(std::string_view bytes);
  // End of the stream: an unterminated last line and event are reported as if a blank line followed.
  void finish();
  // Bytes of an unterminated line held so far.
  size_t pending() const { return line_.size(); }

 private:
  void line_done();
  void dispatch();

  Callback on_data_;
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool after_cr_ = false;
};

}  // namespace tokenhost::loadgen
