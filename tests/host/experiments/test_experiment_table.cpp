// The experiment table as the router and the admin API use it: routing (sticky, chosen, held back),
// refused changes that change nothing, measurements into the report, plugin metrics per arm.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "experiments/experiment_table.hpp"
#include "harness.hpp"

namespace experiments_experiment_table_tests {

using namespace tokenhost::experiments;
using nlohmann::json;

namespace {

std::map<std::string, std::string> engine_models() { return {{"cont", "tiny"}, {"static", "tiny"}, {"other", "big"}}; }

ExperimentSpec spec(bool allow_choice = true) {
  ExperimentSpec s;
  s.name = "sched";
  s.allow_request_choice = allow_choice;
  s.min_samples = 5;
  s.arms = {{"a", "cont", 50, {}}, {"b", "static", 50, {"batch"}}};
  return s;
}

Routing routed(const ExperimentTable& t, RequestKeys keys) {
  auto r = t.route(keys);
  REQUIRE(std::holds_alternative<Routing>(r));
  return std::get<Routing>(r);
}

}  // namespace

TEST_CASE("experiment table: requests route by sticky key, choice and class", "[experiments]") {
  ExperimentTable t;
  REQUIRE(std::holds_alternative<std::monostate>(t.route({"tiny", "s1", "", "", "", ""})));
  REQUIRE_FALSE(t.start(spec(), "tiny"));
  REQUIRE(t.experiment_of_engine("static") == "sched");
  REQUIRE(t.experiment_of_engine("other").empty());
  // Another model is not in the experiment.
  REQUIRE(std::holds_alternative<std::monostate>(t.route({"big", "s1", "", "", "", ""})));
  for (int i = 0; i < 50; ++i) {
    const std::string key = "session-" + std::to_string(i);
    auto r = routed(t, {"tiny", key, "", "", "", ""});
    REQUIRE(r.kind == Routing::Kind::compared);
    REQUIRE(r.engine == spec().arms[assign(spec(), bucket_of("sched", key), "").arm].engine);
    REQUIRE(routed(t, {"tiny", key, "", "", "", ""}).engine == r.engine);
  }
  auto chosen = routed(t, {"tiny", "", "", "", "b", ""});
  REQUIRE(chosen.engine == "static");
  REQUIRE(chosen.kind == Routing::Kind::chosen);
  auto held = routed(t, {"tiny", "s", "", "", "", "batch"});
  REQUIRE(held.engine == "cont");
  REQUIRE(held.kind == Routing::Kind::held_back);
  auto missing = t.route({"tiny", "", "", "", "z", ""});
  REQUIRE(std::holds_alternative<std::string>(missing));
  REQUIRE_THAT(std::get<std::string>(missing), Catch::Contains("no arm 'z'"));
  REQUIRE_THAT(t.check_choice("big", "a"), Catch::Contains("no running experiment"));
  REQUIRE(t.check_choice("tiny", "a").empty());
}

TEST_CASE("experiment table: requests without a key split as the percentages say, in any run of them",
          "[experiments]") {
  for (uint32_t percent_a : {50u, 30u, 7u}) {
    INFO("arm a takes " << percent_a << "%");
    ExperimentTable t;
    ExperimentSpec s = spec();
    s.arms[0].percent = percent_a;
    s.arms[1].percent = 100 - percent_a;
    REQUIRE_FALSE(t.start(s, "tiny"));
    // Every window of n consecutive keyless requests gives arm a within 2 of n * percent_a / 100
    // (independent draws would stray by ~sqrt(n): 4 at n = 64).
    std::vector<int> to_a;
    for (int i = 0; i < 400; ++i) to_a.push_back(routed(t, {"tiny", "", "", "", "", ""}).engine == "cont");
    for (size_t n : {10u, 64u, 100u, 400u})
      for (size_t begin = 0; begin + n <= to_a.size(); begin += 7) {
        int a = 0;
        for (size_t i = begin; i < begin + n; ++i) a += to_a[i];
        INFO("requests " << begin << " to " << begin + n);
        REQUIRE(std::abs(double(a) - double(n) * percent_a / 100.0) <= 2.0);
      }
  }
}

TEST_CASE("experiment table: a request may choose its arm only when the experiment allows it", "[experiments]") {
  ExperimentTable t;
  REQUIRE_FALSE(t.start(spec(false), "tiny"));
  REQUIRE_THAT(t.check_choice("tiny", "b"), Catch::Contains("allow_request_choice"));
  REQUIRE(std::holds_alternative<std::string>(t.route({"tiny", "", "", "", "b", ""})));
}

TEST_CASE("experiment table: a refused change changes nothing, and a valid one changes the split", "[experiments]") {
  ExperimentTable t;
  REQUIRE_FALSE(t.start(spec(), "tiny"));
  const json before = t.list();
  auto views = t.engine_views(engine_models());
  REQUIRE_FALSE(t.change("sched", {{"arms", {{{"name", "a"}, {"percent", 70}}}}}, views).empty());  // sums to 120
  REQUIRE_FALSE(t.change("sched", {{"arms", {{{"name", "a"}, {"percent", "70"}}}}}, views).empty());
  REQUIRE_FALSE(t.change("sched", {{"arms", "a"}}, views).empty());
  REQUIRE(t.change("nope", {{"arms", {{{"name", "a"}, {"percent", 70}}}}}, views).front().http_status == 404);
  REQUIRE(t.list() == before);
  REQUIRE(t.change("sched", {{"arms", {{{"name", "a"}, {"percent", 100}}, {{"name", "b"}, {"percent", 0}}}}}, views).empty());
  for (int i = 0; i < 20; ++i) REQUIRE(routed(t, {"tiny", "k" + std::to_string(i), "", "", "", ""}).engine == "cont");
  // A second experiment on the same engines or model, or under a used name, is refused.
  REQUIRE(t.start(spec(), "tiny")->http_status == 409);
  auto other = spec();
  other.name = "other";
  auto problems = validate(other, t.engine_views(engine_models()), t.running_on_model("tiny"));
  REQUIRE(problems.size() == 3);  // both engines, and the model
  for (const auto& p : problems) REQUIRE(p.http_status == 409);
}

TEST_CASE("experiment table: measurements reach the report with intervals and a verdict", "[experiments]") {
  std::map<std::string, double> counter = {{"cont", 10}, {"static", 100}};
  double steps = 4, step_seconds = 0.2, step_tokens = 40;  // engine "cont" has stepped; "static" not yet
  ExperimentTable t([&](const std::string& engine) {
    MetricValues v{{"tokenhost_plugin_drafts_total{plugin=\"x\"}", {counter[engine], true}},
                   {"tokenhost_plugin_depth{plugin=\"x\"}", {counter[engine] / 10, false}}};
    if (engine == "cont") {
      v["tokenhost_step_seconds_count"] = {steps, true};
      v["tokenhost_step_seconds_sum"] = {step_seconds, true};
      v["tokenhost_step_tokens_total"] = {step_tokens, true};
      v["tokenhost_spec_accepted_length_count{plugin=\"spec_decode.ngram\"}"] = {steps, true};
      v["tokenhost_spec_draft_tokens_total{plugin=\"spec_decode.ngram\"}"] = {step_tokens / 2, true};
      v["tokenhost_spec_accepted_tokens_total{plugin=\"spec_decode.ngram\"}"] = {step_tokens / 8, true};
      v["tokenhost_prefix_lookups_total"] = {steps, true};
      v["tokenhost_prefix_hits_total"] = {steps / 2, true};
      v["tokenhost_prefix_cached_tokens_total"] = {step_tokens * 4, true};
      // Two KV tiers: their counts add up in the report.
      v["tokenhost_kv_connector_loaded_blocks_total{tier=\"0\",connector=\"kv_connector.disk\"}"] = {steps * 3, true};
      v["tokenhost_kv_connector_loaded_blocks_total{tier=\"1\",connector=\"kv_connector.fixture\"}"] = {steps, true};
      v["tokenhost_kv_connector_hits_total{tier=\"0\",connector=\"kv_connector.disk\"}"] = {steps / 2, true};
      v["tokenhost_kv_connector_load_seconds_total{tier=\"0\",connector=\"kv_connector.disk\"}"] = {step_seconds, true};
    }
    return v;
  });
  REQUIRE_FALSE(t.start(spec(), "tiny"));
  Routing a{routed(t, {"tiny", "", "", "", "a", ""})}, b{routed(t, {"tiny", "", "", "", "b", ""})};
  a.kind = b.kind = Routing::Kind::compared;
  auto report = *t.report("sched");
  REQUIRE(report["comparisons"][0]["verdict"] == "no significant difference yet (n=0/5)");
  for (int i = 0; i < 8; ++i) {
    Outcome o;
    o.completed = true;
    o.tokens_out = 10;
    o.ttft_s = 0.010 + 0.001 * i;
    o.itl_s = 0.002;
    o.e2e_s = 0.05;
    t.record(a, o);
    o.ttft_s = 0.040 + 0.001 * i;  // b is 4x slower to its first token
    t.record(b, o);
  }
  Outcome failed;
  failed.failed = true;
  t.record(b, failed);
  t.record(routed(t, {"tiny", "", "", "", "a", ""}), Outcome{});  // chosen: counted apart
  counter["cont"] = 25;
  steps = 14, step_seconds = 0.7, step_tokens = 240;
  report = *t.report("sched");
  const json& arm_a = report["arms"][0];
  REQUIRE(arm_a["requests"] == 8);
  REQUIRE(arm_a["chosen"] == 1);
  REQUIRE(arm_a["tokens_out"] == 80);
  REQUIRE(arm_a["ttft_s"]["n"] == 8);
  REQUIRE(arm_a["ttft_s"]["mean"].get<double>() == Approx(0.0135));
  REQUIRE(arm_a["ttft_s"]["ci95"][0].get<double>() < 0.0135);
  REQUIRE(arm_a["plugin_metrics"]["tokenhost_plugin_drafts_total{plugin=\"x\"}"] == 15);  // since the start
  REQUIRE(arm_a["plugin_metrics"]["tokenhost_plugin_depth{plugin=\"x\"}"] == 2.5);      // a gauge: as it is
  REQUIRE(arm_a["plugin_metrics"].size() == 2);  // the step metrics go to the load, not here
  // The load: 10 steps of 200 tokens in 0.5 s since the start.
  REQUIRE(arm_a["load"]["steps"] == 10);
  REQUIRE(arm_a["load"]["tokens"] == 200);
  REQUIRE(arm_a["load"]["tokens_per_step"].get<double>() == Approx(20));
  REQUIRE(arm_a["load"]["step_s_mean"].get<double>() == Approx(0.05));
  REQUIRE(arm_a["load"]["step_s_per_token"].get<double>() == Approx(0.0025));
  REQUIRE(arm_a["load"]["engine_tok_s"].get<double>() == Approx(400));  // 200 tokens in 0.5 s of steps
  REQUIRE(report["notes"] == json::array());  // arm b has not stepped: no load to compare
  // Speculation since the start: 10 drafts of 100 tokens, 25 accepted.
  REQUIRE(arm_a["speculation"]["drafts"] == 10);
  REQUIRE(arm_a["speculation"]["draft_tokens"] == 100);
  REQUIRE(arm_a["speculation"]["accepted_tokens"] == 25);
  REQUIRE(arm_a["speculation"]["acceptance"].get<double>() == Approx(0.25));
  REQUIRE(arm_a["speculation"]["accepted_per_draft"].get<double>() == Approx(2.5));
  // Prefix reuse since the start: 10 prompts looked up, 5 found a prefix, 800 tokens from the cache.
  REQUIRE(arm_a["prefix_cache"]["lookups"] == 10);
  REQUIRE(arm_a["prefix_cache"]["hits"] == 5);
  REQUIRE(arm_a["prefix_cache"]["cached_tokens"] == 800);
  REQUIRE(arm_a["prefix_cache"]["hit_rate"].get<double>() == Approx(0.5));
  // KV tiers since the start (both tiers' loads), and the mean load time over the prompts that hit.
  REQUIRE(arm_a["kv_connectors"]["loaded_blocks"] == 30 + 10);
  REQUIRE(arm_a["kv_connectors"]["hits"] == 5);
  REQUIRE(arm_a["kv_connectors"]["mean_load_seconds"].get<double>() == Approx(0.5 / 5));
  REQUIRE(arm_a["kv_connectors"]["load_failures"] == 0);
  REQUIRE(report["arms"][1]["kv_connectors"]["loaded_blocks"] == 0);
  REQUIRE(report["arms"][1]["kv_connectors"]["mean_load_seconds"].is_null());
  REQUIRE(report["arms"][1]["prefix_cache"]["hit_rate"].is_null());
  REQUIRE(report["arms"][1]["speculation"]["drafts"] == 0);
  REQUIRE(report["arms"][1]["speculation"]["acceptance"].is_null());
  REQUIRE(report["arms"][1]["load"]["steps"] == 0);  // no step yet: no means
  REQUIRE(report["arms"][1]["load"]["tokens_per_step"].is_null());
  REQUIRE(report["arms"][1]["load"]["step_s_mean"].is_null());
  REQUIRE(report["arms"][1]["failed"] == 1);
  REQUIRE(report["arms"][1]["requests"] == 9);
  const json& ttft = report["comparisons"][0];
  REQUIRE(ttft["metric"] == "ttft_s");
  REQUIRE(ttft["significant"] == true);
  REQUIRE(ttft["verdict"] == "b is slower (ttft_s 222% higher)");
  REQUIRE(ttft["ratio"].get<double>() == Approx(0.0435 / 0.0135));
  const json& e2e = report["comparisons"][2];
  REQUIRE(e2e["significant"] == false);
  REQUIRE(e2e["verdict"] == "no difference (n=8)");
  REQUIRE_FALSE(t.stop("sched"));
  REQUIRE(t.stop("sched")->http_status == 409);
  counter["cont"] = 1000;  // after the stop: the report keeps the values at the stop
  auto stopped = *t.report("sched");
  REQUIRE(stopped["state"] == "stopped");
  REQUIRE(stopped["arms"][0]["plugin_metrics"]["tokenhost_plugin_drafts_total{plugin=\"x\"}"] == 15);
  REQUIRE(std::holds_alternative<std::monostate>(t.route({"tiny", "s", "", "", "", ""})));
  REQUIRE(t.arm_labels().empty());
}

TEST_CASE("experiment table: the report says when the arms' steps carried loads different enough to confound latency", "[experiments]") {
  // Both arms stepped for 1 s: a's steps carry 20 tokens, b's (on fresh random loads) 1.1x or 2-3x that.
  auto rng = tokenhost::testing::fresh_rng("experiment table notes");
  for (int trial = 0; trial < 10; ++trial) {
    const bool far = trial % 2 == 1;
    const double b_per_step = 20 * (far ? std::uniform_real_distribution<double>(2.0, 3.0)(rng) : 1.1);
    double steps = 0;  // the report counts what the engines did since the experiment started
    ExperimentTable t([&](const std::string& engine) {
      const double per_step = engine == "cont" ? 20 : b_per_step;
      return MetricValues{{"tokenhost_step_seconds_count", {steps, true}},
                          {"tokenhost_step_seconds_sum", {steps / 10, true}},
                          {"tokenhost_step_tokens_total", {steps * per_step, true}}};
    });
    REQUIRE_FALSE(t.start(spec(), "tiny"));
    steps = 10;
    const json report = *t.report("sched");
    INFO("trial " << trial << " b per step " << b_per_step << ": " << report["notes"].dump());
    REQUIRE(report["arms"][1]["load"]["engine_tok_s"].get<double>() == Approx(10 * b_per_step));
    if (far) {
      REQUIRE(report["notes"].size() == 1);
      REQUIRE_THAT(report["notes"][0].get<std::string>(), Catch::Matchers::Contains("arm b's steps carried") &&
                                                               Catch::Matchers::Contains("the tokens of arm a's"));
    } else {
      REQUIRE(report["notes"].empty());
    }
  }
}

}  // namespace experiments_experiment_table_tests
