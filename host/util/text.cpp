#include "util/text.hpp"

#include <stdexcept>

#include <algorithm>
#include <numeric>

namespace tokenhost {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    // A candidate that begins the word ("int" for "integer") is as plausible as a typo.
    if (c.size() >= 3 && word.size() > c.size() && word.compare(0, c.size(), c) == 0) return c;
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string suggestion(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best = closest_match(word, candidates);
  if (!best.empty()) return " (did you mean '" + best + "'?)";
  if (candidates.empty()) return "";
  return " (expected one of: " + join(candidates, ", ") + ")";
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::optional<HostPort> split_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  HostPort out{text.substr(0, colon), 0};
  try {
    size_t used = 0;
    out.port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return out;
}

}  // namespace tokenhost
