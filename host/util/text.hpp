// Small text helpers shared by the host: closest-match suggestions, joining, "host:port".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokenhost {

// Levenshtein distance between a and b.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to word, or "" when none is close enough to be a plausible typo
// (distance at most max(2, |word| / 3)).
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" when a close candidate exists, else " (expected one of: a, b, c)".
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, std::string_view separator);

// "host:port" split at the last ':' (host not empty, the port std::stoi's whole reading of the rest),
// or nullopt. The port's range is the caller's to check.
struct HostPort {
  std::string host;
  int port = 0;
};
std::optional<HostPort> split_host_port(const std::string& text);

}  // namespace tokenhost
