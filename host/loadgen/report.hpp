// The figures of a run, as a table for people and as JSON.
//
// JSON keys (times in milliseconds unless the key says _s; each summary is
// {"count", "mean", "min", "p50", "p90", "p99", "max"}, with null figures when count is 0):
//   requests_ok, requests_failed, errors (up to 5 distinct messages, with their counts:
//   [{"message", "count"}]), wall_time_s, request_throughput (requests/s, ok ones), output_tokens,
//   output_throughput (output tokens/s, over the wall time), input_tokens, input_tokens_source
//   ("server": usage.prompt_tokens of every ok request; "estimate": synthetic words), ttft_ms (time to
//   first token), itl_ms (inter-token latency: gaps between successive text arrivals of a request),
//   e2e_latency_ms (end to end), per_request_output_throughput (output tokens / end-to-end seconds,
//   per request), ttft_later_turns_ms (conversations only: the time to first token of the turns after
//   each conversation's first, which may find the conversation cached), and "config" with the options
//   of the run.
// Latencies, token counts and throughputs count the ok requests only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/runner.hpp"
#include "util/stats.hpp"

namespace tokenhost::loadgen {

struct Report {
  uint64_t ok = 0, failed = 0;
  std::vector<std::pair<std::string, uint64_t>> errors;  // first distinct messages, with counts
  double wall_s = 0;
  double request_throughput = 0, output_throughput = 0;
  uint64_t output_tokens = 0, input_tokens = 0;
  bool input_tokens_from_server = false;
  Summary ttft_ms, itl_ms, e2e_ms, per_request_tps;
  bool conversations = false;  // some request was a conversation's later turn
  Summary ttft_later_turns_ms;
};

inline constexpr size_t kReportedErrors = 5;

Report make_report(const RunResult& run);
std::string format_table(const Report& report);
nlohmann::json to_json(const Report& report, const nlohmann::json& config);

}  // namespace tokenhost::loadgen
