#include <catch2/catch.hpp>

#include "metrics/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace metrics_tests {

using tokenhost::metrics::Family;
using tokenhost::metrics::Registry;
using tokenhost::metrics::Type;
namespace metrics = tokenhost::metrics;

namespace {
bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
}  // namespace

TEST_CASE("counter adds and rejects negative deltas", "[metrics]") {
  Registry reg;
  Family& c = reg.family(Type::counter, "requests_total", "Requests.", {"engine", "code"});
  CHECK(c.type() == Type::counter);
  CHECK(c.name() == "requests_total");
  CHECK(c.label_names() == std::vector<std::string>{"engine", "code"});

  CHECK(c.value({"a", "200"}) == 0.0);  // no series yet
  c.add({"a", "200"}, 1);
  c.add({"a", "200"}, 2.5);
  c.add({"b", "500"}, 0);
  CHECK(c.value({"a", "200"}) == 3.5);
  CHECK(c.value({"b", "500"}) == 0.0);
  CHECK(c.series_count() == 2);

  CHECK_THROWS_AS(c.add({"a", "200"}, -1), std::invalid_argument);
  CHECK_THROWS_AS(c.add({"a", "200"}, std::nan("")), std::invalid_argument);
  CHECK(c.value({"a", "200"}) == 3.5);
  CHECK_THROWS_AS(c.set({"a", "200"}, 1), std::invalid_argument);
  CHECK_THROWS_AS(c.observe({"a", "200"}, 1), std::invalid_argument);
  CHECK_THROWS_AS(c.count({"a", "200"}), std::invalid_argument);

  c.remove({"a", "200"});
  CHECK(c.value({"a", "200"}) == 0.0);
  CHECK(c.series_count() == 1);
  c.remove({"never", "seen"});  // no effect
  CHECK(c.series_count() == 1);
}

TEST_CASE("gauge sets and adds in both directions", "[metrics]") {
  Registry reg;
  Family& g = reg.family(Type::gauge, "queue_depth", "Queued requests.", {"engine"});
  g.set({"e0"}, 10);
  g.add({"e0"}, -3);
  g.add({"e0"}, 0.5);
  CHECK(g.value({"e0"}) == 7.5);
  g.add({"e1"}, -2);
  CHECK(g.value({"e1"}) == -2.0);
  CHECK_THROWS_AS(g.observe({"e0"}, 1), std::invalid_argument);

  Family& plain = reg.family(Type::gauge, "up", "Up.");
  CHECK(plain.series_count() == 1);  // label-less family exists from the start
  CHECK(plain.value({}) == 0.0);
  plain.set({}, 1);
  CHECK(plain.value({}) == 1.0);
}

TEST_CASE("histogram count, sum and buckets", "[metrics]") {
  Registry reg;
  Family& h = reg.family(Type::histogram, "latency_seconds", "Latency.", {"engine"}, {0.1, 1, 10});
  CHECK(h.buckets() == std::vector<double>{0.1, 1, 10});
  h.observe({"e"}, 0.05);
  h.observe({"e"}, 0.1);  // on the bound: le is inclusive
  h.observe({"e"}, 5);
  h.observe({"e"}, 100);
  CHECK(h.count({"e"}) == 4);
  CHECK(h.sum({"e"}) == Approx(105.15));
  CHECK(h.bucket_counts({"e"}) == std::vector<uint64_t>{2, 2, 3, 4});
  CHECK(h.count({"other"}) == 0);
  CHECK(h.sum({"other"}) == 0.0);
  CHECK_THROWS_AS(h.add({"e"}, 1), std::invalid_argument);
  CHECK_THROWS_AS(h.value({"e"}), std::invalid_argument);

  h.observe({"e"}, std::nan(""));  // only the +Inf bucket
  CHECK(h.bucket_counts({"e"}) == std::vector<uint64_t>{2, 2, 3, 5});

  Family& d = reg.family(Type::histogram, "default_seconds", "Default buckets.");
  CHECK(d.buckets() == metrics::default_buckets());
  CHECK(d.buckets().size() == 13);
}

TEST_CASE("histogram cumulative buckets match a plain count on random values", "[metrics]") {
  Registry reg;
  const std::vector<double> bounds{-5, -1, 0, 0.25, 0.5, 1, 2, 4, 8};
  Family& h = reg.family(Type::histogram, "random_values", "Random.", {}, bounds);

  std::random_device rd;
  const auto seed = rd();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-10, 10);
  std::uniform_int_distribution<std::size_t> pick(0, bounds.size() - 1);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) {
    // Every tenth value sits exactly on a bound to exercise the inclusive edge.
    double v = (i % 10 == 0) ? bounds[pick(gen)] : dist(gen);
    values.push_back(v);
    h.observe({}, v);
  }

  const std::vector<uint64_t> got = h.bucket_counts({});
  REQUIRE(got.size() == bounds.size() + 1);
  std::string text = reg.prometheus_text();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    const double bound = bounds[i];
    const auto expected = static_cast<uint64_t>(
        std::count_if(values.begin(), values.end(), [&](double v) { return v <= bound; }));
    INFO("bound " << bound);
    CHECK(got[i] == expected);
    CHECK(contains(text, "random_values_bucket{le=\"" + metrics::format_value(bound) + "\"} " +
                             std::to_string(expected) + "\n"));
  }
  CHECK(got.back() == values.size());
  CHECK(h.count({}) == values.size());
  CHECK(contains(text, "random_values_bucket{le=\"+Inf\"} " + std::to_string(values.size()) + "\n"));
  CHECK(contains(text, "random_values_count " + std::to_string(values.size()) + "\n"));
  double plain_sum = 0;
  for (double v : values) plain_sum += v;
  CHECK(h.sum({}) == Approx(plain_sum).margin(1e-6));
}

TEST_CASE("label arity mismatch throws naming the family", "[metrics]") {
  Registry reg;
  Family& c = reg.family(Type::counter, "tokens_total", "Tokens.", {"engine", "kind"});
  Family& g = reg.family(Type::gauge, "kv_free", "Free.", {"engine"});
  Family& h = reg.family(Type::histogram, "ttft_seconds", "TTFT.", {"engine"});
  CHECK_THROWS_AS(c.add({"e"}, 1), std::invalid_argument);
  CHECK_THROWS_AS(c.add({"e", "prompt", "x"}, 1), std::invalid_argument);
  CHECK_THROWS_AS(c.value({}), std::invalid_argument);
  CHECK_THROWS_AS(c.remove({"e"}), std::invalid_argument);
  CHECK_THROWS_AS(g.set({}, 1), std::invalid_argument);
  CHECK_THROWS_AS(h.observe({"a", "b"}, 1), std::invalid_argument);
  CHECK_THROWS_AS(h.count({}), std::invalid_argument);
  CHECK_THROWS_AS(h.sum({}), std::invalid_argument);
  CHECK_THROWS_WITH(c.add({"e"}, 1), Catch::Contains("tokens_total"));
  CHECK_THROWS_WITH(h.observe({}, 1), Catch::Contains("ttft_seconds"));
  CHECK(c.series_count() == 0);
}

TEST_CASE("invalid metric and label names are rejected", "[metrics]") {
  Registry reg;
  for (const char* bad : {"", "1abc", "a-b", "a b", "tökens", "a.b", "-x"}) {
    INFO("name '" << bad << "'");
    CHECK_THROWS_AS(reg.family(Type::counter, bad, "h"), std::invalid_argument);
  }
  CHECK_THROWS_WITH(reg.family(Type::counter, "bad-name", "h"), Catch::Contains("bad-name"));
  for (const char* good : {"a", "_a", ":a", "a:b_c9", "tokenhost:requests_total", "A_Z"}) {
    INFO("name '" << good << "'");
    CHECK_NOTHROW(reg.family(Type::gauge, good, "h"));
  }

  for (const char* bad : {"", "1x", "a:b", "a-b", "__reserved", "x y"}) {
    INFO("label '" << bad << "'");
    CHECK_THROWS_AS(reg.family(Type::counter, "c_total", "h", {bad}), std::invalid_argument);
  }
  CHECK_THROWS_WITH(reg.family(Type::counter, "c_total", "h", {"ok", "b@d"}), Catch::Contains("b@d"));
  CHECK_THROWS_AS(reg.family(Type::counter, "c_total", "h", {"x", "x"}), std::invalid_argument);
  CHECK_NOTHROW(reg.family(Type::counter, "ok_total", "h", {"_x", "a9", "le"}));  // le is fine here
  CHECK_THROWS_WITH(reg.family(Type::histogram, "h_seconds", "h", {"le"}), Catch::Contains("le"));
  CHECK(reg.find("c_total") == nullptr);
  CHECK(reg.find("h_seconds") == nullptr);

  // Buckets: finite, strictly ascending, and only for histograms.
  CHECK_THROWS_AS(reg.family(Type::histogram, "b1", "h", {}, {1, 0.5}), std::invalid_argument);
  CHECK_THROWS_AS(reg.family(Type::histogram, "b2", "h", {}, {1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(reg.family(Type::histogram, "b3", "h", {},
                             {1, std::numeric_limits<double>::infinity()}),
                  std::invalid_argument);
  CHECK_THROWS_AS(reg.family(Type::histogram, "b4", "h", {}, {std::nan("")}), std::invalid_argument);
  CHECK_THROWS_AS(reg.family(Type::gauge, "b5", "h", {}, {1}), std::invalid_argument);
}

TEST_CASE("re-registration returns the same family or says what differs", "[metrics]") {
  Registry reg;
  Family& c = reg.family(Type::counter, "req_total", "Requests.", {"engine"});
  Family& again = reg.family(Type::counter, "req_total", "Other help is fine.", {"engine"});
  CHECK(&c == &again);
  CHECK(again.help() == "Requests.");
  CHECK(reg.find("req_total") == &c);
  CHECK(reg.find("nope") == nullptr);

  CHECK_THROWS_WITH(reg.family(Type::gauge, "req_total", "h", {"engine"}),
                    Catch::Contains("counter") && Catch::Contains("gauge"));
  CHECK_THROWS_WITH(reg.family(Type::counter, "req_total", "h", {"model"}),
                    Catch::Contains("label names"));
  CHECK_THROWS_AS(reg.family(Type::counter, "req_total", "h"), std::invalid_argument);

  Family& h = reg.family(Type::histogram, "lat_seconds", "h", {}, {0.5, 1});
  CHECK(&reg.family(Type::histogram, "lat_seconds", "h", {}, {0.5, 1}) == &h);
  CHECK_THROWS_WITH(reg.family(Type::histogram, "lat_seconds", "h", {}, {0.5, 2}),
                    Catch::Contains("buckets"));
  CHECK_THROWS_WITH(reg.family(Type::histogram, "lat_seconds", "h"), Catch::Contains("buckets"));
  Family& d = reg.family(Type::histogram, "def_seconds", "h");
  CHECK(&reg.family(Type::histogram, "def_seconds", "h", {}, metrics::default_buckets()) == &d);

  // Stable addresses: creating many more families does not move existing ones.
  for (int i = 0; i < 500; ++i) reg.family(Type::gauge, "g" + std::to_string(i), "h");
  CHECK(reg.find("req_total") == &c);
  c.add({"e"}, 1);
  CHECK(reg.find("req_total")->value({"e"}) == 1.0);
}

TEST_CASE("number formatting and escaping", "[metrics]") {
  CHECK(metrics::format_value(0) == "0");
  CHECK(metrics::format_value(-0.0) == "0");
  CHECK(metrics::format_value(42) == "42");
  CHECK(metrics::format_value(-7) == "-7");
  CHECK(metrics::format_value(1e15) == "1000000000000000");
  CHECK(metrics::format_value(0.1) == "0.1");
  CHECK(metrics::format_value(2.5) == "2.5");
  CHECK(metrics::format_value(0.0025) == "0.0025");
  CHECK(metrics::format_value(1.0 / 3) == "0.3333333333333333");
  CHECK(metrics::format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(metrics::format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(metrics::format_value(std::nan("")) == "NaN");
  CHECK(std::stod(metrics::format_value(1e300)) == 1e300);

  CHECK(metrics::escape_help("a\\b\nc\"d") == "a\\\\b\\nc\"d");
  CHECK(metrics::escape_label_value("a\\b\nc\"d") == "a\\\\b\\nc\\\"d");

  Registry reg;
  Family& g = reg.family(Type::gauge, "esc", "Line one\nback\\slash \"quoted\"", {"path"});
  g.set({"C:\\dir\n\"x\""}, 1);
  const std::string text = reg.prometheus_text();
  CHECK(text ==
        "# HELP esc Line one\\nback\\\\slash \"quoted\"\n"
        "# TYPE esc gauge\n"
        "esc{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1\n");
}

TEST_CASE("concurrent updates from 4 threads are exact", "[metrics]") {
  Registry reg;
  constexpr int kThreads = 4;
  constexpr int kIters = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&reg, t] {
      // Every thread registers the same families concurrently; all must get the same objects.
      Family& c = reg.family(Type::counter, "work_total", "Work.", {"engine"});
      Family& h = reg.family(Type::histogram, "work_seconds", "Work.", {"engine"}, {1, 2});
      Family& own = reg.family(Type::gauge, "thread_" + std::to_string(t), "Own.");
      for (int i = 0; i < kIters; ++i) {
        c.add({"shared"}, 1);
        c.add({"e" + std::to_string(i % 3)}, 0.5);
        h.observe({"shared"}, (i % 3) + 0.5);
        own.add({}, 1);
        if (i % 1000 == 0) (void)reg.prometheus_text();
      }
    });
  }
  for (auto& th : threads) th.join();

  Family* c = reg.find("work_total");
  Family* h = reg.find("work_seconds");
  REQUIRE(c != nullptr);
  REQUIRE(h != nullptr);
  CHECK(c->value({"shared"}) == double(kThreads) * kIters);
  double spread = c->value({"e0"}) + c->value({"e1"}) + c->value({"e2"});
  CHECK(spread == 0.5 * kThreads * kIters);
  CHECK(h->count({"shared"}) == uint64_t(kThreads) * kIters);
  const auto buckets = h->bucket_counts({"shared"});
  uint64_t per_third = 0;  // observations with i % 3 == 0, per thread
  for (int i = 0; i < kIters; ++i) per_third += (i % 3 == 0);
  CHECK(buckets[0] == per_third * kThreads);
  CHECK(buckets[2] == uint64_t(kThreads) * kIters);
  for (int t = 0; t < kThreads; ++t) CHECK(reg.find("thread_" + std::to_string(t))->value({}) == kIters);
}

TEST_CASE("exposition text of a small fixed registry", "[metrics]") {
  Registry reg;
  Family& req = reg.family(Type::counter, "tokenhost_requests_total", "Requests served.",
                           {"engine", "code"});
  Family& up = reg.family(Type::gauge, "tokenhost_up", "Whether the host is up.");
  Family& lat = reg.family(Type::histogram, "tokenhost_latency_seconds", "Request latency.",
                           {"engine"}, {0.1, 0.5, 2.5});
  reg.family(Type::gauge, "tokenhost_empty", "No series yet.", {"engine"});
  Family& temp = reg.family(Type::gauge, "tokenhost_temperature", "Temperature.", {"gpu"});

  req.add({"llama", "500"}, 2);
  req.add({"llama", "200"}, 10);
  req.add({"beta", "200"}, 1.5);
  up.set({}, 1);
  lat.observe({"llama"}, 0.05);
  lat.observe({"llama"}, 0.3);
  lat.observe({"llama"}, 0.5);
  lat.observe({"llama"}, 7);
  lat.observe({"alpha"}, 0.25);
  temp.set({"1"}, std::numeric_limits<double>::infinity());
  temp.set({"0"}, -0.125);
  temp.set({"2"}, std::nan(""));
  temp.set({"3"}, 99);
  temp.remove({"3"});

  const std::string expected =
      "# HELP tokenhost_empty No series yet.\n"
      "# TYPE tokenhost_empty gauge\n"
      "# HELP tokenhost_latency_seconds Request latency.\n"
      "# TYPE tokenhost_latency_seconds histogram\n"
      "tokenhost_latency_seconds_bucket{engine=\"alpha\",le=\"0.1\"} 0\n"
      "tokenhost_latency_seconds_bucket{engine=\"alpha\",le=\"0.5\"} 1\n"
      "tokenhost_latency_seconds_bucket{engine=\"alpha\",le=\"2.5\"} 1\n"
      "tokenhost_latency_seconds_bucket{engine=\"alpha\",le=\"+Inf\"} 1\n"
      "tokenhost_latency_seconds_sum{engine=\"alpha\"} 0.25\n"
      "tokenhost_latency_seconds_count{engine=\"alpha\"} 1\n"
      "tokenhost_latency_seconds_bucket{engine=\"llama\",le=\"0.1\"} 1\n"
      "tokenhost_latency_seconds_bucket{engine=\"llama\",le=\"0.5\"} 3\n"
      "tokenhost_latency_seconds_bucket{engine=\"llama\",le=\"2.5\"} 3\n"
      "tokenhost_latency_seconds_bucket{engine=\"llama\",le=\"+Inf\"} 4\n"
      "tokenhost_latency_seconds_sum{engine=\"llama\"} 7.85\n"
      "tokenhost_latency_seconds_count{engine=\"llama\"} 4\n"
      "# HELP tokenhost_requests_total Requests served.\n"
      "# TYPE tokenhost_requests_total counter\n"
      "tokenhost_requests_total{engine=\"beta\",code=\"200\"} 1.5\n"
      "tokenhost_requests_total{engine=\"llama\",code=\"200\"} 10\n"
      "tokenhost_requests_total{engine=\"llama\",code=\"500\"} 2\n"
      "# HELP tokenhost_temperature Temperature.\n"
      "# TYPE tokenhost_temperature gauge\n"
      "tokenhost_temperature{gpu=\"0\"} -0.125\n"
      "tokenhost_temperature{gpu=\"1\"} +Inf\n"
      "tokenhost_temperature{gpu=\"2\"} NaN\n"
      "# HELP tokenhost_up Whether the host is up.\n"
      "# TYPE tokenhost_up gauge\n"
      "tokenhost_up 1\n";
  CHECK(reg.prometheus_text() == expected);
}

TEST_CASE("derived labels: every family with the key label gets them at exposition, valued by the key", "[metrics]") {
  Registry reg;
  reg.family(Type::counter, "t_tokens_total", "Tokens.", {"engine"}).add({"cont"}, 3);
  reg.family(Type::counter, "t_tokens_total", "Tokens.", {"engine"}).add({"solo"}, 1);
  reg.family(Type::histogram, "t_ttft_seconds", "TTFT.", {"engine"}, {0.5}).observe({"cont"}, 0.25);
  reg.family(Type::gauge, "t_other", "No engine.", {"gpu"}).set({"0"}, 1);
  reg.family(Type::gauge, "t_own", "Has its own arm.", {"engine", "arm"}).set({"cont", "x"}, 2);
  reg.set_derived_labels({"engine", {"experiment", "arm"}, {{"cont", {"sched", "b"}}}});
  const std::string text = reg.prometheus_text();
  CHECK(text.find("t_tokens_total{engine=\"cont\",experiment=\"sched\",arm=\"b\"} 3\n") != std::string::npos);
  CHECK(text.find("t_tokens_total{engine=\"solo\",experiment=\"\",arm=\"\"} 1\n") != std::string::npos);
  CHECK(text.find("t_ttft_seconds_bucket{engine=\"cont\",experiment=\"sched\",arm=\"b\",le=\"0.5\"} 1\n") != std::string::npos);
  CHECK(text.find("t_ttft_seconds_count{engine=\"cont\",experiment=\"sched\",arm=\"b\"} 1\n") != std::string::npos);
  CHECK(text.find("t_other{gpu=\"0\"} 1\n") != std::string::npos);
  CHECK(text.find("t_own{engine=\"cont\",arm=\"x\"} 2\n") != std::string::npos);  // never two labels of one name
  // The series themselves are unchanged; a new setting replaces the old.
  CHECK(reg.find("t_tokens_total")->value({"cont"}) == 3);
  reg.set_derived_labels({"engine", {"experiment", "arm"}, {}});
  CHECK(reg.prometheus_text().find("t_tokens_total{engine=\"cont\",experiment=\"\",arm=\"\"} 3\n") != std::string::npos);
  CHECK_THROWS_AS(reg.set_derived_labels({"engine", {"bad-name"}, {}}), std::invalid_argument);
}

TEST_CASE("values_where: the series of one label value, keyed by name and their other labels", "[metrics]") {
  Registry reg;
  reg.family(Type::counter, "p_drafts_total", "", {"engine", "plugin"}).add({"cont", "x"}, 4);
  reg.family(Type::counter, "p_drafts_total", "", {"engine", "plugin"}).add({"stat", "x"}, 9);
  reg.family(Type::gauge, "p_depth", "", {"engine", "plugin"}).set({"cont", "x"}, 1.5);
  reg.family(Type::histogram, "p_len", "", {"engine", "plugin"}, {1.0}).observe({"cont", "x"}, 0.5);
  reg.family(Type::counter, "q_other_total", "", {"engine"}).add({"cont"}, 1);
  auto v = reg.values_where("p_", "engine", "cont");
  REQUIRE(v.size() == 4);
  CHECK(v.at("p_drafts_total{plugin=\"x\"}").value == 4);
  CHECK(v.at("p_drafts_total{plugin=\"x\"}").cumulative);
  CHECK(v.at("p_depth{plugin=\"x\"}").value == 1.5);
  CHECK_FALSE(v.at("p_depth{plugin=\"x\"}").cumulative);
  CHECK(v.at("p_len_count{plugin=\"x\"}").value == 1);
  CHECK(v.at("p_len_sum{plugin=\"x\"}").value == 0.5);
  CHECK(reg.values_where("p_", "engine", "none").empty());
}

}  // namespace metrics_tests
