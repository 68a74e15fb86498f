#include "loadgen/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "experiments/statistics.hpp"
#include "util/stats.hpp"

namespace tokenhost::loadgen {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> finite(const std::vector<double>& values) {
  std::vector<double> out;
  for (double v : values)
    if (std::isfinite(v)) out.push_back(v);
  return out;
}

std::string figure_text(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, std::abs(v) >= 100 ? "%.1f" : std::abs(v) >= 1 ? "%.2f" : "%.4f", v);
  return buf;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

const std::vector<ComparedFigure>& compared_figures() {
  static const std::vector<ComparedFigure> figures = {
      {"output_throughput", "tok/s", true},
      {"request_throughput", "req/s", true},
      {"ttft_ms.p50", "ms", false},
      {"ttft_ms.p99", "ms", false},
      {"itl_ms.p50", "ms", false},
      {"itl_ms.p99", "ms", false},
      {"e2e_latency_ms.p50", "ms", false},
      {"e2e_latency_ms.p99", "ms", false},
      {"per_request_output_throughput.p50", "tok/s", true},
  };
  return figures;
}

double figure_of(const nlohmann::json& report, const std::string& name) {
  const nlohmann::json* at = &report;
  size_t begin = 0;
  while (begin <= name.size()) {
    const size_t dot = name.find('.', begin);
    const std::string key = name.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!at->is_object() || !at->contains(key)) return kNaN;
    at = &(*at)[key];
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return at->is_number() ? at->get<double>() : kNaN;
}

nlohmann::json repeats_json(const std::vector<nlohmann::json>& reports, const nlohmann::json& config) {
  nlohmann::json figures = nlohmann::json::object();
  for (const ComparedFigure& f : compared_figures()) {
    std::vector<double> values;
    for (const auto& r : reports) values.push_back(figure_of(r, f.name));
    const std::vector<double> ok = finite(values);
    nlohmann::json entry = {{"unit", f.unit}, {"values", nlohmann::json::array()}};
    for (double v : values) entry["values"].push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
    entry["median"] = ok.empty() ? nlohmann::json(nullptr) : nlohmann::json(percentile(ok, 50));
    if (ok.size() >= 2) {
      double mean = 0, var = 0;
      for (double v : ok) mean += v;
      mean /= double(ok.size());
      for (double v : ok) var += (v - mean) * (v - mean);
      var /= double(ok.size() - 1);
      const double half = experiments::student_t_quantile(0.975, double(ok.size() - 1)) * std::sqrt(var / double(ok.size()));
      entry["ci95"] = {mean - half, mean + half};
    } else {
      entry["ci95"] = nullptr;
    }
    figures[f.name] = std::move(entry);
  }
  return {{"repeats", reports.size()}, {"runs", reports}, {"figures", std::move(figures)}, {"config", config}};
}

std::string format_repeats(const nlohmann::json& repeats) {
  std::string out = "over " + std::to_string(repeats.value("repeats", 0)) + " runs: median [95% interval of the mean]\n";
  for (const ComparedFigure& f : compared_figures()) {
    const nlohmann::json& e = repeats["figures"][f.name];
    std::string line = pad("  " + f.name + " (" + f.unit + ")", 44) + pad(e["median"].is_number() ? figure_text(e["median"].get<double>()) : "-", 12);
    if (e["ci95"].is_array()) line += "[" + figure_text(e["ci95"][0].get<double>()) + ", " + figure_text(e["ci95"][1].get<double>()) + "]";
    out += line + "\n";
  }
  return out;
}

std::vector<double> figure_values(const nlohmann::json& doc, const std::string& name) {
  if (doc.contains("figures")) {
    const nlohmann::json& e = doc["figures"].value(name, nlohmann::json());
    std::vector<double> values;
    if (e.is_object() && e["values"].is_array())
      for (const auto& v : e["values"]) values.push_back(v.is_number() ? v.get<double>() : kNaN);
    return finite(values);
  }
  if (!doc.contains("requests_ok"))
    throw std::invalid_argument("not a tokenhost bench --json file (neither a run's figures nor a repeated run's)");
  return finite({figure_of(doc, name)});
}

std::vector<CompareRow> compare(const nlohmann::json& baseline, const nlohmann::json& candidate, double alpha, double min_effect) {
  std::vector<CompareRow> rows;
  const double tests = double(compared_figures().size());
  for (const ComparedFigure& f : compared_figures()) {
    const std::vector<double> a = figure_values(baseline, f.name), b = figure_values(candidate, f.name);
    CompareRow row;
    row.figure = f;
    row.n_baseline = a.size();
    row.n_candidate = b.size();
    if (a.empty() || b.empty()) {
      row.baseline = a.empty() ? kNaN : percentile(a, 50);
      row.candidate = b.empty() ? kNaN : percentile(b, 50);
      row.delta = kNaN;
      row.p_value = kNaN;
      row.verdict = "no values";
      rows.push_back(row);
      continue;
    }
    row.baseline = percentile(a, 50);
    row.candidate = percentile(b, 50);
    row.delta = row.baseline != 0 ? (row.candidate - row.baseline) / std::abs(row.baseline) : kNaN;
    if (a.size() < 2 || b.size() < 2) {
      row.p_value = kNaN;
      row.verdict = "one run: --repeat 3 or more to test";
      rows.push_back(row);
      continue;
    }
    // Throughputs and latencies change by factors: the test is on their logarithms (a run twice as fast
    // and one half as fast weigh the same), when every value is positive.
    const bool logs = std::all_of(a.begin(), a.end(), [](double v) { return v > 0; }) &&
                      std::all_of(b.begin(), b.end(), [](double v) { return v > 0; });
    experiments::Sample sa, sb, raw_a, raw_b;
    for (double v : a) sa.add(logs ? std::log(v) : v), raw_a.add(v);
    for (double v : b) sb.add(logs ? std::log(v) : v), raw_b.add(v);
    const experiments::Comparison c = experiments::welch(sa, sb, 2);
    row.p_value = std::min(1.0, c.p_value * tests);
    const double effect = raw_a.mean() != 0 ? std::abs(raw_b.mean() - raw_a.mean()) / std::abs(raw_a.mean()) : 0;
    if (row.p_value < alpha && effect >= min_effect) {
      const bool higher = raw_b.mean() > raw_a.mean();
      row.verdict = higher == f.higher_is_better ? "better" : "worse";
    } else {
      row.verdict = "no significant difference";
    }
    rows.push_back(row);
  }
  return rows;
}

std::string format_compare(const std::vector<CompareRow>& rows, const std::string& baseline_name, const std::string& candidate_name,
                           double alpha, double min_effect) {
  std::string out = "baseline " + baseline_name + ", candidate " + candidate_name + " (medians; Welch's t-test on the runs' values, p times " +
                    std::to_string(rows.size()) + " figures, called at p < " + figure_text(alpha) + " and a change of " +
                    figure_text(100 * min_effect) + "% or more)\n";
  out += pad("figure", 44) + pad("baseline", 12) + pad("candidate", 12) + pad("delta", 10) + pad("p", 9) + "verdict\n";
  for (const CompareRow& r : rows) {
    out += pad(r.figure.name + " (" + r.figure.unit + ")", 44) + pad(figure_text(r.baseline), 12) + pad(figure_text(r.candidate), 12) +
           pad(std::isfinite(r.delta) ? (r.delta >= 0 ? "+" : "") + figure_text(100 * r.delta) + "%" : "-", 10) +
           pad(std::isfinite(r.p_value) ? figure_text(r.p_value) : "-", 9) + r.verdict + "\n";
  }
  return out;
}

}  // namespace tokenhost::loadgen
