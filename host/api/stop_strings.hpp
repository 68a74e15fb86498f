// Stop strings and UTF-8 boundaries for streamed text.
//
// Tokens decode to pieces that split text anywhere: a stop string can arrive across several tokens, and
// a byte-level token can carry half of a multi-byte character. Text that might turn out to be the start
// of a stop string, or that ends in an incomplete character, is held back until the next piece settles
// it; everything else is released at once so streaming latency stays one token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tokenhost::api {

// Length of the incomplete UTF-8 sequence at the end of `text` (0..3): bytes that need more bytes to
// form a character. Invalid bytes do not count as incomplete; waiting would not fix them.
size_t incomplete_utf8_suffix(std::string_view text);

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored (the request parser refuses them anyway).
  explicit StopMatcher(std::vector<std::string> stops = {});

  struct Output {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string was completed: `text` ends right before it; generation ends
    std::string stop;      // the stop string that matched, when stopped
  };

  // Appends a decoded piece. After a stop, further pieces are ignored and return an empty Output.
  Output feed(std::string_view piece);

  // End of generation without a stop (length limit, EOS): releases what was held back, including an
  // incomplete trailing character, which the JSON layer then shows as U+FFFD.
  std::string finish();

  bool stopped() const { return stopped_; }
  // Bytes held back right now.
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tokenhost::api
