#include "loadgen/report.hpp"

#include <cmath>
#include <cstdio>

namespace tokenhost::loadgen {

Report make_report(const RunResult& run) {
  Report rep;
  rep.wall_s = run.wall_s;
  std::vector<double> ttft, itl, e2e, tps, ttft_later;
  bool all_server_counts = true;
  uint64_t server_input = 0, estimated_input = 0;
  for (const auto& r : run.results) {
    if (!r.ok) {
      ++rep.failed;
      bool seen = false;
      for (auto& [msg, n] : rep.errors)
        if (msg == r.error) {
          ++n;
          seen = true;
        }
      if (!seen && rep.errors.size() < kReportedErrors) rep.errors.emplace_back(r.error, 1);
      continue;
    }
    ++rep.ok;
    rep.output_tokens += r.output_tokens;
    estimated_input += r.prompt_words;
    if (r.prompt_tokens)
      server_input += *r.prompt_tokens;
    else
      all_server_counts = false;
    e2e.push_back(1e3 * r.latency_s);
    if (!r.token_times_s.empty()) ttft.push_back(1e3 * r.token_times_s.front());
    if (r.turn > 0 && !r.token_times_s.empty()) ttft_later.push_back(1e3 * r.token_times_s.front());
    rep.conversations = rep.conversations || r.turn > 0;
    for (size_t i = 1; i < r.token_times_s.size(); ++i) itl.push_back(1e3 * (r.token_times_s[i] - r.token_times_s[i - 1]));
    if (r.latency_s > 0) tps.push_back(double(r.output_tokens) / r.latency_s);
  }
  rep.input_tokens_from_server = rep.ok > 0 && all_server_counts;
  rep.input_tokens = rep.input_tokens_from_server ? server_input : estimated_input;
  if (rep.wall_s > 0) {
    rep.request_throughput = double(rep.ok) / rep.wall_s;
    rep.output_throughput = double(rep.output_tokens) / rep.wall_s;
  }
  rep.ttft_ms = summarize(std::move(ttft));
  rep.ttft_later_turns_ms = summarize(std::move(ttft_later));
  rep.itl_ms = summarize(std::move(itl));
  rep.e2e_ms = summarize(std::move(e2e));
  rep.per_request_tps = summarize(std::move(tps));
  return rep;
}

namespace {

std::string fmt(double v, int decimals = 2) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string row(const char* name, const std::string& value) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-34s %s\n", name, value.c_str());
  return buf;
}

std::string summary_rows(const char* name, const Summary& s, const char* unit) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-14s %10s %10s %10s %10s %10s  %s\n", name, fmt(s.mean).c_str(), fmt(s.p50).c_str(),
                fmt(s.p90).c_str(), fmt(s.p99).c_str(), fmt(s.max).c_str(), unit);
  return buf;
}

nlohmann::json summary_json(const Summary& s) {
  auto v = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {{"count", s.count}, {"mean", v(s.mean)}, {"min", v(s.min)}, {"p50", v(s.p50)},
          {"p90", v(s.p90)},  {"p99", v(s.p99)},   {"max", v(s.max)}};
}

}  // namespace

std::string format_table(const Report& r) {
  std::string out;
  out += row("requests ok / failed", std::to_string(r.ok) + " / " + std::to_string(r.failed));
  out += row("wall time (s)", fmt(r.wall_s, 3));
  out += row("request throughput (req/s)", fmt(r.request_throughput, 3));
  out += row("output tokens", std::to_string(r.output_tokens));
  out += row("output throughput (tokens/s)", fmt(r.output_throughput, 1));
  out += row(r.input_tokens_from_server ? "input tokens (server count)" : "input tokens (estimate: words)",
             std::to_string(r.input_tokens));
  char head[256];
  std::snprintf(head, sizeof head, "  %-14s %10s %10s %10s %10s %10s\n", "", "mean", "p50", "p90", "p99", "max");
  out += head;
  out += summary_rows("TTFT", r.ttft_ms, "ms");
  if (r.conversations) out += summary_rows("TTFT turns 2+", r.ttft_later_turns_ms, "ms");
  out += summary_rows("ITL", r.itl_ms, "ms");
  out += summary_rows("end to end", r.e2e_ms, "ms");
  out += summary_rows("per request", r.per_request_tps, "output tokens/s");
  if (!r.errors.empty()) {
    out += "  errors:\n";
    for (const auto& [msg, n] : r.errors) out += "    " + std::to_string(n) + " x " + msg + "\n";
    if (r.failed > 0) {
      uint64_t shown = 0;
      for (const auto& e : r.errors) shown += e.second;
      if (shown < r.failed) out += "    (" + std::to_string(r.failed - shown) + " more with other messages)\n";
    }
  }
  return out;
}

nlohmann::json to_json(const Report& r, const nlohmann::json& config) {
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& [msg, n] : r.errors) errors.push_back({{"message", msg}, {"count", n}});
  nlohmann::json j = {{"config", config},
          {"requests_ok", r.ok},
          {"requests_failed", r.failed},
          {"errors", errors},
          {"wall_time_s", r.wall_s},
          {"request_throughput", r.request_throughput},
          {"output_tokens", r.output_tokens},
          {"output_throughput", r.output_throughput},
          {"input_tokens", r.input_tokens},
          {"input_tokens_source", r.input_tokens_from_server ? "server" : "estimate"},
          {"ttft_ms", summary_json(r.ttft_ms)},
          {"itl_ms", summary_json(r.itl_ms)},
          {"e2e_latency_ms", summary_json(r.e2e_ms)},
          {"per_request_output_throughput", summary_json(r.per_request_tps)}};
  if (r.conversations) j["ttft_later_turns_ms"] = summary_json(r.ttft_later_turns_ms);
  return j;
}

}  // namespace tokenhost::loadgen
