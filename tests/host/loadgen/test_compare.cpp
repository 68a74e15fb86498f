// bench's repeated runs and their comparison (loadgen/compare.hpp) on made-up run figures: the JSON of
// repeats (values, median, interval), and the verdicts: a factor-of-ten slowdown with a noisy baseline
// is called, runs drawn from one distribution are not (over many draws, at the corrected level), a
// significant change under --min-effect is not, one run a side gives deltas without a test.
#include <catch2/catch.hpp>

#include <random>

#include "harness.hpp"
#include "loadgen/compare.hpp"

namespace loadgen_compare_tests {

using namespace tokenhost;
using namespace tokenhost::loadgen;
using tokenhost::testing::fresh_rng;
using nlohmann::json;

namespace {

// A run's report with every compared figure at `scale` times a base value (latencies inversely).
json run(double scale) {
  return {{"requests_ok", 10},
          {"output_throughput", 1000 * scale},
          {"request_throughput", 10 * scale},
          {"ttft_ms", {{"p50", 20 / scale}, {"p99", 40 / scale}}},
          {"itl_ms", {{"p50", 5 / scale}, {"p99", 9 / scale}}},
          {"e2e_latency_ms", {{"p50", 100 / scale}, {"p99", 150 / scale}}},
          {"per_request_output_throughput", {{"p50", 200 * scale}}}};
}

json repeated(const std::vector<double>& scales) {
  std::vector<json> runs;
  for (double s : scales) runs.push_back(run(s));
  return repeats_json(runs, json::object());
}

std::map<std::string, std::string> verdicts(const json& a, const json& b, double min_effect = 0.05) {
  std::map<std::string, std::string> out;
  for (const auto& r : compare(a, b, 0.05, min_effect)) out[r.figure.name] = r.verdict;
  return out;
}

}  // namespace

TEST_CASE("bench compare: repeats give values, median and interval per figure", "[loadgen][compare]") {
  const json doc = repeated({1.0, 1.2, 0.9});
  REQUIRE(doc["repeats"] == 3);
  const json& f = doc["figures"]["output_throughput"];
  CHECK(f["values"] == json::array({1000.0, 1200.0, 900.0}));
  CHECK(f["median"].get<double>() == Approx(1000));
  // mean 1033.3, sd 152.75, t(0.975, 2) = 4.303: half-width 379.5
  CHECK(f["ci95"][0].get<double>() == Approx(1033.33 - 379.47).epsilon(1e-3));
  CHECK(f["ci95"][1].get<double>() == Approx(1033.33 + 379.47).epsilon(1e-3));
  CHECK(figure_values(doc, "ttft_ms.p50").size() == 3);
  CHECK(figure_values(run(1), "ttft_ms.p50") == std::vector<double>{20});
  CHECK_THROWS_WITH(figure_values(json{{"a", 1}}, "ttft_ms.p50"), Catch::Contains("not a tokenhost bench --json file"));
}

TEST_CASE("bench compare: a slowdown is called worse on every figure, a speed-up better", "[loadgen][compare]") {
  const json base = repeated({0.8, 1.0, 1.25});  // a noisy baseline
  for (const auto& [name, v] : verdicts(base, repeated({0.1, 0.11, 0.09}))) CHECK(v == "worse");
  for (const auto& [name, v] : verdicts(base, repeated({10, 11, 9}))) CHECK(v == "better");
  // Significant, but under the smallest change called.
  for (const auto& [name, v] : verdicts(repeated({1, 1.001, 0.999}), repeated({1.02, 1.021, 1.019}), 0.05))
    CHECK(v == "no significant difference");
  for (const auto& [name, v] : verdicts(repeated({1, 1.001, 0.999}), repeated({1.02, 1.021, 1.019}), 0.01)) CHECK(v == "better");
  for (const auto& r : compare(run(1), run(0.5), 0.05, 0.05)) {
    CHECK(r.verdict == "one run: --repeat 3 or more to test");
    CHECK(r.delta == Approx(r.figure.higher_is_better ? -0.5 : 1.0));
  }
}

TEST_CASE("bench compare: runs from one distribution are rarely called different", "[loadgen][compare]") {
  auto rng = fresh_rng("bench compare");
  std::lognormal_distribution<double> noise(0, 0.15);
  int called = 0;
  const int trials = 400;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> a(3), b(3);
    for (auto& x : a) x = noise(rng);
    for (auto& x : b) x = noise(rng);
    for (const auto& [name, v] : verdicts(repeated(a), repeated(b), 0)) {
      if (v != "no significant difference") {
        ++called;
        break;
      }
    }
  }
  // The figures of a run move together (one scale each here), so the family-wise rate is near the
  // per-figure 0.05 / 9: a few calls in 400 at most.
  CHECK(called <= 12);
}

}  // namespace loadgen_compare_tests
