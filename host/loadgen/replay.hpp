// A server's recorded traffic (server/traffic_recorder.hpp) as a load for `tokenhost bench --replay`:
// each request again at its recorded time after the first, with its first prompt's length in tokens
// (the recorded text when the recording kept it) and its recorded output length as max_tokens. Every
// request goes to bench's --endpoint, whichever route it was recorded on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tokenhost::loadgen {

struct ReplayRequest {
  double at_s = 0;             // after the first request of the recording
  uint32_t prompt_tokens = 0;  // as the server counted them (its BOS and template included)
  uint32_t output_tokens = 0;  // what the request generated (each choice's most)
  std::string text;            // its first prompt's text when recorded, else ""
};

// Reads a recording: one JSON object per line (blank lines skipped). Lines of failed requests, or
// with no prompt, are left out. Throws std::invalid_argument naming the file and line of anything that
// is not a recorded request, or when no request is left.
std::vector<ReplayRequest> read_traffic(const std::string& path);
// The same from a recording's text; `name` is what messages call it.
std::vector<ReplayRequest> parse_traffic(const std::string& text, const std::string& name);

}  // namespace tokenhost::loadgen
