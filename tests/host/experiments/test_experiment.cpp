// Experiment definitions: validation with located problems, the admin API's JSON, sticky assignment
// (hash values computed independently, split proportions within binomial bounds), hold-back.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "experiments/experiment.hpp"

namespace experiments_experiment_tests {

using namespace tokenhost::experiments;
using nlohmann::json;

namespace {

std::vector<EngineView> engines() {
  return {{"cont", "tiny", ""}, {"static", "tiny", ""}, {"fifo", "tiny", ""}, {"other", "big", ""}, {"busy", "tiny", "older"}};
}

ExperimentSpec two_arms() {
  ExperimentSpec s;
  s.name = "sched";
  s.arms = {{"a", "cont", 50, {}}, {"b", "static", 50, {}}};
  return s;
}

// The first problem's field path as text, "" when there is none.
std::string first_path(const std::vector<Problem>& p) { return p.empty() ? "<valid>" : path_text(p.front().path); }

}  // namespace

TEST_CASE("experiments: a valid definition has no problems", "[experiments]") {
  REQUIRE(validate(two_arms(), engines()).empty());
}

TEST_CASE("experiments: invalid definitions are refused with the field and the reason", "[experiments]") {
  auto s = two_arms();
  SECTION("percents must sum to 100") {
    s.arms[1].percent = 40;
    auto p = validate(s, engines());
    REQUIRE(first_path(p) == "arms");
    REQUIRE_THAT(p.front().message, Catch::Contains("sum to 90"));
  }
  SECTION("a percent outside 0-100") {
    s.arms[0].percent = 150;
    s.arms[1].percent = -50;
    REQUIRE(first_path(validate(s, engines())) == "arms[0].percent");
  }
  SECTION("arm names are unique") {
    s.arms[1].name = "a";
    REQUIRE(first_path(validate(s, engines())) == "arms[1].name");
  }
  SECTION("an unknown engine is a 404 with a suggestion") {
    s.arms[1].engine = "statik";
    auto p = validate(s, engines());
    REQUIRE(first_path(p) == "arms[1].engine");
    REQUIRE(p.front().http_status == 404);
    REQUIRE_THAT(p.front().message, Catch::Contains("did you mean 'static'"));
  }
  SECTION("arms serve one model") {
    s.arms[1].engine = "other";
    auto p = validate(s, engines());
    REQUIRE(first_path(p) == "arms[1].engine");
    REQUIRE_THAT(p.front().message, Catch::Contains("one model"));
  }
  SECTION("the same engine twice") {
    s.arms[1].engine = "cont";
    REQUIRE(first_path(validate(s, engines())) == "arms[1].engine");
  }
  SECTION("an engine in another running experiment is a conflict") {
    s.arms[1].engine = "busy";
    auto p = validate(s, engines());
    REQUIRE(p.front().http_status == 409);
    REQUIRE_THAT(p.front().message, Catch::Contains("older"));
  }
  SECTION("one running experiment per model") {
    auto p = validate(s, engines(), {"older"});
    REQUIRE(p.size() == 1);
    REQUIRE(p.front().http_status == 409);
  }
  SECTION("a class held back from every arm") {
    s.arms[0].holdback_classes = {"batch"};
    s.arms[1].holdback_classes = {"batch"};
    REQUIRE_THAT(validate(s, engines()).front().message, Catch::Contains("'batch' is held back from every arm"));
  }
  SECTION("a class held back from every arm with traffic") {
    s.arms = {{"a", "cont", 100, {"batch"}}, {"b", "static", 0, {}}};
    REQUIRE_FALSE(validate(s, engines()).empty());
  }
  SECTION("one arm is not an experiment") {
    s.arms.resize(1);
    s.arms[0].percent = 100;
    REQUIRE(first_path(validate(s, engines())) == "arms");
  }
  SECTION("names that cannot go in a URL or a label") {
    s.name = "a b";
    REQUIRE(first_path(validate(s, engines())) == "name");
  }
}

TEST_CASE("experiments: the admin API's JSON is read strictly", "[experiments]") {
  json body = {{"name", "sched"},
               {"sticky_key", "user"},
               {"allow_request_choice", true},
               {"arms", {{{"name", "a"}, {"engine", "cont"}, {"percent", 70}},
                         {{"name", "b"}, {"engine", "static"}, {"percent", 30}, {"holdback_classes", {"batch"}}}}}};
  auto ok = spec_from_json(body);
  REQUIRE(std::holds_alternative<ExperimentSpec>(ok));
  const auto& s = std::get<ExperimentSpec>(ok);
  REQUIRE(s.sticky_key == StickyKey::user);
  REQUIRE(s.allow_request_choice);
  REQUIRE(s.arms.size() == 2);
  REQUIRE(s.arms[1].holdback_classes == std::vector<std::string>{"batch"});
  REQUIRE(s.min_samples == 30);

  auto problem = [](json b) {
    auto r = spec_from_json(b);
    REQUIRE(std::holds_alternative<std::vector<Problem>>(r));
    return std::get<std::vector<Problem>>(r).front();
  };
  auto b = body;
  b["arms"][1]["percnt"] = 30;
  auto p = problem(b);
  REQUIRE(path_text(p.path) == "arms[1].percnt");
  REQUIRE_THAT(p.message, Catch::Contains("did you mean 'percent'"));
  b = body;
  b["arms"][0]["percent"] = "70";
  REQUIRE(path_text(problem(b).path) == "arms[0].percent");
  b = body;
  b["sticky_key"] = "cookie";
  REQUIRE(path_text(problem(b).path) == "sticky_key");
  b = body;
  b.erase("arms");
  REQUIRE(path_text(problem(b).path) == "arms");
  REQUIRE(path_text(problem(json::array()).path).empty());
}

TEST_CASE("experiments: a split change applies to named arms and keeps the rest", "[experiments]") {
  auto s = two_arms();
  auto r = apply_change(s, {{"arms", {{{"name", "b"}, {"percent", 20}, {"holdback_classes", {"batch"}}}}}});
  REQUIRE(std::holds_alternative<ExperimentSpec>(r));
  auto changed = std::get<ExperimentSpec>(r);
  REQUIRE(changed.arms[0].percent == 50);  // validate() then refuses the sum of 70
  REQUIRE(changed.arms[1].percent == 20);
  REQUIRE(changed.arms[1].holdback_classes == std::vector<std::string>{"batch"});
  REQUIRE_FALSE(validate(changed, engines()).empty());
  auto bad = apply_change(s, {{"arms", {{{"name", "c"}, {"percent", 20}}}}});
  REQUIRE(std::holds_alternative<std::vector<Problem>>(bad));
  REQUIRE(path_text(std::get<std::vector<Problem>>(bad).front().path) == "arms[0].name");
  auto engine = apply_change(s, {{"arms", {{{"name", "a"}, {"engine", "fifo"}}}}});
  REQUIRE(std::holds_alternative<std::vector<Problem>>(engine));
}

TEST_CASE("experiments: the assignment hash matches values computed independently", "[experiments]") {
  // FNV-1a 64 over experiment, NUL, key; then SplitMix64's finalizer (computed with Python integers).
  REQUIRE(assignment_hash("sched", "user-1") == 0x4787f8b7ba0ff4e7ULL);
  REQUIRE(assignment_hash("sched", "user-2") == 0x0098daf4e3709828ULL);
  REQUIRE(assignment_hash("sched", "") == 0x13edecaf48e9a7bfULL);
  REQUIRE(assignment_hash("exp-b", "session 42") == 0x7e03c6877e5e21f9ULL);
  REQUIRE(assignment_hash("a", "\xc3\xa9") == 0x2d4268f5540be07eULL);
  REQUIRE(bucket_of("sched", "user-1") == 43);
  REQUIRE(bucket_of("sched", "user-2") == 20);
  REQUIRE(bucket_of("exp-b", "session 42") == 9);
}

TEST_CASE("experiments: the same key always lands on the same arm, and the split over 100k keys matches the percents",
          "[experiments]") {
  ExperimentSpec s;
  s.name = "three";
  s.arms = {{"a", "cont", 20, {}}, {"b", "static", 30, {}}, {"c", "fifo", 50, {}}};
  REQUIRE(validate(s, engines()).empty());
  const int n = 100000;
  std::map<size_t, int> counts;
  for (int i = 0; i < n; ++i) {
    const std::string key = "key-" + std::to_string(i);
    auto a = assign(s, bucket_of(s.name, key), "");
    REQUIRE_FALSE(a.held_back);
    REQUIRE(assign(s, bucket_of(s.name, key), "").arm == a.arm);
    ++counts[a.arm];
  }
  for (size_t arm = 0; arm < 3; ++arm) {
    const double p = s.arms[arm].percent / 100.0;
    const double sd = std::sqrt(n * p * (1 - p));
    INFO("arm " << arm << ": " << counts[arm] << " of " << n);
    REQUIRE(std::fabs(counts[arm] - n * p) < 4.5 * sd);  // binomial bound, false alarm ~1e-5
  }
}

TEST_CASE("experiments: a held-back class goes to the other arms in their proportions", "[experiments]") {
  ExperimentSpec s;
  s.name = "hold";
  s.arms = {{"a", "cont", 20, {}}, {"b", "static", 30, {"batch"}}, {"c", "fifo", 50, {}}};
  REQUIRE(validate(s, engines()).empty());
  std::map<size_t, int> counts;
  for (uint32_t bucket = 0; bucket < 100; ++bucket) {
    auto a = assign(s, bucket, "batch");
    REQUIRE(a.held_back);
    ++counts[a.arm];
    REQUIRE_FALSE(assign(s, bucket, "interactive").held_back);
  }
  REQUIRE(counts[1] == 0);
  REQUIRE(counts[0] == 29);  // buckets whose place in [0, 70) is below 20: 100 * 20 / 70, rounded up
  REQUIRE(counts[2] == 71);
  // Without a class, bucket ranges follow the percents in arm order.
  REQUIRE(assign(s, 19, "").arm == 0);
  REQUIRE(assign(s, 20, "").arm == 1);
  REQUIRE(assign(s, 49, "").arm == 1);
  REQUIRE(assign(s, 50, "").arm == 2);
  REQUIRE(assign(s, 99, "").arm == 2);
}

}  // namespace experiments_experiment_tests
