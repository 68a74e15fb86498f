// Repeated runs and their comparison (`tokenhost bench --repeat N`, `tokenhost bench compare A B`).
//
// The unit of comparison is a run, not a request: requests of one run share the server's state (its
// batch, its cache, the machine's mood that minute), so the figures that decide are each run's, and a
// difference counts only when it holds across repeated runs. Each compared figure of each run is one
// value; a file of N runs gives N values per figure: their median, and a 95% interval of their mean
// (Student's t). Two files are compared figure by figure with Welch's t-test on those values' logarithms
// (throughputs and latencies change by factors), at a
// level corrected for the number of figures (Bonferroni: alpha / rows), and a difference is called
// only when it is also at least min_effect of the baseline's value (so noise on a quiet figure is not
// called a regression). With one run on either side there is no test: the delta is shown alone.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenhost::loadgen {

struct ComparedFigure {
  std::string name;        // e.g. "ttft_ms.p50"
  std::string unit;        // "tok/s", "req/s", "ms"
  bool higher_is_better;   // throughputs
};
const std::vector<ComparedFigure>& compared_figures();

// A figure of one run's report (to_json): NaN when the report lacks it or it is null.
double figure_of(const nlohmann::json& report, const std::string& name);

// The JSON of N runs: {"repeats": N, "runs": [each report], "figures": {name: {"values", "median",
// "ci95": [lo, hi] (null under 2 runs)}}, "config"}.
nlohmann::json repeats_json(const std::vector<nlohmann::json>& reports, const nlohmann::json& config);
// A table of a repeated run's figures: median and 95% interval.
std::string format_repeats(const nlohmann::json& repeats);

// Each figure's values in a bench JSON file's document: a repeated run's values, or a single run's one
// value. Throws std::invalid_argument naming what is missing for a document that is neither.
std::vector<double> figure_values(const nlohmann::json& doc, const std::string& name);

struct CompareRow {
  ComparedFigure figure;
  double baseline = 0, candidate = 0;  // medians
  double delta = 0;                    // (candidate - baseline) / baseline
  size_t n_baseline = 0, n_candidate = 0;
  double p_value = 1;                  // Welch's, two-sided, times the number of rows (at most 1); NaN without a test
  // "better", "worse", "no significant difference", or "one run: --repeat 3 or more to test".
  std::string verdict;
};

std::vector<CompareRow> compare(const nlohmann::json& baseline, const nlohmann::json& candidate, double alpha, double min_effect);
std::string format_compare(const std::vector<CompareRow>& rows, const std::string& baseline_name, const std::string& candidate_name,
                           double alpha, double min_effect);

}  // namespace tokenhost::loadgen
