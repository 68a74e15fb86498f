#include "loadgen/replay.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "util/atomic_file.hpp"

namespace tokenhost::loadgen {

std::vector<ReplayRequest> read_traffic(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string("--replay: ") + e.what());
  }
  return parse_traffic(text, path);
}

std::vector<ReplayRequest> parse_traffic(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::vector<ReplayRequest> out;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    auto bad = [&](const std::string& why) { throw std::invalid_argument(where + ": " + why + " (a line of serve --record)"); };
    if (!j.is_object()) bad("not a JSON object");
    for (const char* key : {"t", "prompt_tokens", "completion_tokens", "outcome"})
      if (!j.contains(key)) bad(std::string("no \"") + key + "\"");
    if (!j["t"].is_number() || !(j["t"].get<double>() >= 0) || j["t"].get<double>() > 1e9) bad("\"t\" is not a time in seconds");
    if (!j["prompt_tokens"].is_array() || !j["completion_tokens"].is_array()) bad("token counts are not arrays");
    if (j["outcome"] != "ok" || j["prompt_tokens"].empty()) continue;
    ReplayRequest r;
    r.at_s = j["t"].get<double>();
    if (!j["prompt_tokens"][0].is_number_unsigned() || j["prompt_tokens"][0].get<uint64_t>() > (1u << 24))
      bad("\"prompt_tokens\" holds something other than counts");
    r.prompt_tokens = j["prompt_tokens"][0].get<uint32_t>();
    for (const auto& c : j["completion_tokens"]) {
      if (!c.is_number_unsigned() || c.get<uint64_t>() > (1u << 24)) bad("\"completion_tokens\" holds something other than counts");
      r.output_tokens = std::max(r.output_tokens, c.get<uint32_t>());
    }
    if (j.contains("prompts") && j["prompts"].is_array() && !j["prompts"].empty() && j["prompts"][0].is_string())
      r.text = j["prompts"][0].get<std::string>();
    if (r.output_tokens == 0) r.output_tokens = 1;  // a prompt scored alone (max_tokens 0) replays as one token
    out.push_back(std::move(r));
  }
  if (out.empty()) throw std::invalid_argument("--replay: " + path + " holds no request that finished ok");
  std::stable_sort(out.begin(), out.end(), [](const ReplayRequest& a, const ReplayRequest& b) { return a.at_s < b.at_s; });
  const double first = out.front().at_s;
  for (auto& r : out) r.at_s -= first;
  return out;
}

}  // namespace tokenhost::loadgen
