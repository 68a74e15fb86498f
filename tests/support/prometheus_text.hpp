// Reading Prometheus text (GET /metrics) in tests: one series' value.
#pragma once

#include <string>

namespace tokenhost::testing {

// The value of `series` (its name and labels exactly as exported, e.g. `x_total{reason="api_key"}`) in
// Prometheus text, 0 when the series is absent.
inline double prometheus_value(const std::string& text, const std::string& series) {
  const size_t at = ("\n" + text).find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size() + 1));  // at: in "\n" + text
}

}  // namespace tokenhost::testing
