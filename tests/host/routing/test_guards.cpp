// routing/breaker.hpp and routing/overload.hpp on their own: a breaker opens after the configured run
// of failed or slow requests and not before, stays out of routing for open_ms, lets exactly `probes`
// requests through half-open, closes when they succeed and opens again when one fails; a cancelled
// probe frees its place; the policies refuse bad settings by name; overload classes resolve as the
// header says.
#include <catch2/catch.hpp>

#include "metrics/metrics.hpp"
#include "routing/breaker.hpp"
#include "routing/overload.hpp"

namespace routing_guards_tests {

using namespace tokenhost;
using namespace tokenhost::routing;
using Catch::Matchers::Contains;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

BreakerPolicy policy(uint32_t failures, uint32_t open_ms, uint32_t probes, uint32_t slow_ms = 0) {
  BreakerPolicy p;
  p.enabled = true;
  p.failures = failures;
  p.open_ms = open_ms;
  p.probes = probes;
  p.slow_ms = slow_ms;
  return p;
}

}  // namespace

TEST_CASE("breaker: opens after N consecutive failures, a success in between starts the count again", "[routing][guards]") {
  metrics::Registry reg;
  BreakerBoard board(policy(3, 1000, 1), &reg);
  auto b = board.breaker("e1");
  const auto t0 = Clock::now();
  b->record(true, std::nullopt, false, t0);
  b->record(true, std::nullopt, false, t0);
  b->record(false, 0.01, false, t0);  // resets the run
  b->record(true, std::nullopt, false, t0);
  b->record(true, std::nullopt, false, t0);
  CHECK(b->state() == BreakerState::closed);
  CHECK(b->routable(t0));
  b->record(true, std::nullopt, false, t0);
  CHECK(b->state() == BreakerState::open);
  CHECK_FALSE(b->routable(t0 + milliseconds(999)));
  CHECK(reg.find("tokenhost_breaker_state")->value({"e1"}) == 1);
  CHECK(reg.find("tokenhost_breaker_opened_total")->value({"e1", "failures"}) == 1);
  CHECK(board.json()["engines"][0]["state"] == "open");
  CHECK(board.any_not_closed());
  // Cancels neither fail nor succeed.
  auto c = board.breaker("e2");
  for (int i = 0; i < 10; ++i) c->record(false, std::nullopt, true, t0);
  CHECK(c->state() == BreakerState::closed);
}

TEST_CASE("breaker: half-open lets exactly `probes` requests through: all succeed closes it, one failure opens it again", "[routing][guards]") {
  BreakerBoard board(policy(1, 100, 2), nullptr);
  auto b = board.breaker("e");
  const auto t0 = Clock::now();
  b->record(true, std::nullopt, false, t0);
  REQUIRE(b->state() == BreakerState::open);
  const auto t1 = t0 + milliseconds(100);
  CHECK(b->routable(t1));
  CHECK(b->state() == BreakerState::half_open);
  b->sent();
  CHECK(b->routable(t1));
  b->sent();
  CHECK_FALSE(b->routable(t1));  // both probes out
  // A cancelled probe frees its place.
  b->record(false, std::nullopt, true, t1);
  CHECK(b->routable(t1));
  b->sent();
  b->record(false, 0.01, false, t1);
  CHECK(b->state() == BreakerState::half_open);
  b->record(false, 0.01, false, t1);
  CHECK(b->state() == BreakerState::closed);

  // Again, and this time a probe fails: open for another open_ms.
  b->record(true, std::nullopt, false, t1);
  REQUIRE(b->state() == BreakerState::open);
  const auto t2 = t1 + milliseconds(100);
  REQUIRE(b->routable(t2));
  b->sent();
  b->record(true, std::nullopt, false, t2);
  CHECK(b->state() == BreakerState::open);
  CHECK_FALSE(b->routable(t2 + milliseconds(99)));
  CHECK(b->routable(t2 + milliseconds(100)));
}

TEST_CASE("breaker: a first token later than slow_ms counts as a failure, a request sent before it opened changes nothing", "[routing][guards]") {
  metrics::Registry reg;
  BreakerBoard board(policy(2, 1000, 1, 50), &reg);
  auto b = board.breaker("e");
  const auto t0 = Clock::now();
  b->record(false, 0.049, false, t0);
  b->record(false, 0.051, false, t0);
  CHECK(b->state() == BreakerState::closed);
  b->record(false, 0.2, false, t0);
  CHECK(b->state() == BreakerState::open);
  CHECK(reg.find("tokenhost_breaker_opened_total")->value({"e", "slow"}) == 1);
  CHECK_THAT(board.json()["engines"][0]["last_reason"].get<std::string>(), Contains("50 ms"));
  b->record(false, 0.01, false, t0);  // an answer that left before the breaker opened
  CHECK(b->state() == BreakerState::open);
}

TEST_CASE("breaker: a policy change closes every breaker, disabled breakers record nothing", "[routing][guards]") {
  BreakerBoard board(policy(1, 60000, 1), nullptr);
  auto b = board.breaker("e");
  b->record(true, std::nullopt, false);
  REQUIRE(b->state() == BreakerState::open);
  auto p = board.policy();
  p.enabled = false;
  board.set_policy(p);
  CHECK(b->state() == BreakerState::closed);
  for (int i = 0; i < 5; ++i) b->record(true, std::nullopt, false);
  CHECK(b->state() == BreakerState::closed);
  CHECK_FALSE(board.any_not_closed());
  CHECK(board.breaker("e") == b);  // one breaker per engine name
}

TEST_CASE("breaker policy: changes are checked key by key", "[routing][guards]") {
  BreakerPolicy p;
  p = changed_breaker_policy(p, json{{"enabled", true}, {"failures", 3}, {"slow_ms", 250}}, "test");
  CHECK(p.enabled);
  CHECK(p.failures == 3);
  CHECK(p.slow_ms == 250);
  CHECK(p.open_ms == 10000);
  CHECK_THROWS_WITH(changed_breaker_policy(p, json{{"failure", 3}}, "test"), Contains("no setting 'failure'"));
  CHECK_THROWS_WITH(changed_breaker_policy(p, json{{"failures", 0}}, "test"), Contains("breakers.failures must be an integer in 1..1000"));
  CHECK_THROWS_WITH(changed_breaker_policy(p, json{{"open_ms", "10s"}}, "test"), Contains("breakers.open_ms"));
  CHECK_THROWS_WITH(changed_breaker_policy(p, json{{"enabled", 1}}, "test"), Contains("breakers.enabled must be true or false"));
  CHECK_THROWS_WITH(changed_breaker_policy(p, json::array(), "test"), Contains("an object"));
}

TEST_CASE("overload policy: classes lowest first, the last never shed, unknown and missing classes fall to the default", "[routing][guards]") {
  OverloadPolicy p = changed_overload_policy(
      {}, json{{"enabled", true}, {"classes", json::array({{{"name", "batch"}, {"shed_at", 0.5}}, {{"name", "standard"}, {"shed_at", 1.0}}, {{"name", "interactive"}}})},
               {"default_class", "standard"}},
      "test");
  CHECK(p.class_of("batch") == 0);
  CHECK(p.class_of("interactive") == 2);
  CHECK(p.class_of("") == 1);
  CHECK(p.class_of("gold") == 1);
  CHECK(p.shed_at(0) == 0.5);
  CHECK(p.shed_at(1) == 1.0);
  CHECK(p.shed_at(2) == 0.0);
  CHECK(p.json()["classes"][2].count("shed_at") == 0);
  CHECK(engine_load(3, 4) == 0.75);
  CHECK(engine_load(3, 0) == 0.0);

  auto refused = [&](const json& change) {
    try {
      changed_overload_policy(p, change, "test");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused({{"action", "drop"}}), Contains("overload.action must be \"shed\" or \"cheaper\""));
  CHECK_THAT(refused({{"classes", json::array({{{"name", "only"}}})}}), Contains("2..16 classes"));
  CHECK_THAT(refused({{"classes", json::array({{{"name", "a"}, {"shed_at", 1.0}}, {{"name", "b"}, {"shed_at", 0.5}}, {{"name", "c"}}})}}),
             Contains("below the lower class"));
  CHECK_THAT(refused({{"classes", json::array({{{"name", "a"}, {"shed_at", 1.0}}, {{"name", "b"}, {"shed_at", 2.0}}})}}),
             Contains("never shed: it takes no shed_at"));
  CHECK_THAT(refused({{"classes", json::array({{{"name", "a"}}, {{"name", "b"}}})}}), Contains("classes[0].shed_at must be a number"));
  CHECK_THAT(refused({{"classes", json::array({{{"name", "a"}, {"shed_at", 1.0}}, {{"name", "a"}}})}}), Contains("listed twice"));
  CHECK_THAT(refused({{"default_class", "gold"}}), Contains("default_class 'gold' is not one of the classes"));
  CHECK_THAT(refused({{"retry_after_s", 0}}), Contains("retry_after_s must be an integer in 1..3600"));
  CHECK_THAT(refused({{"shed", true}}), Contains("no setting 'shed'"));
  CHECK_THROWS_WITH(changed_overload_policy({}, json{{"enabled", true}}, "test"), Contains("at least two classes"));
}

}  // namespace routing_guards_tests
