// What the router reads to choose (its array of candidate views, made again on every change of its
// engines): among many engines, router.prefix_affinity finds the one whose prefix summary holds the
// prompt, an engine added, replaced or removed is chosen (or not) from the next request on, and a
// model's requests reach only its engines; the router's status and /metrics say how long choosing took.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>

#include "actors/router.hpp"
#include "eventually.hpp"
#include "harness.hpp"
#include "instant_engine.hpp"
#include "metrics/metrics.hpp"
#include "runtime/prefix_summary.hpp"

namespace actors_router_choice_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

constexpr uint32_t kBlock = 16;

}  // namespace

TEST_CASE("router: choosing finds the engine holding the prompt among many, follows engines as they change, and times itself",
          "[router]") {
  caf::actor_system_config cfg;
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto rng = fresh_rng("router choice");
  metrics::Registry registry;
  RouterInit init;
  init.router = make_plugin("router.prefix_affinity", model_spec());
  init.metrics = &registry;
  // 200 engines of model m, each summary holding 64 random keys; 3 engines of model x.
  std::vector<std::shared_ptr<PrefixSummary>> summaries;
  auto engine = [&](const std::string& name, const std::string& model) {
    auto summary = std::make_shared<PrefixSummary>(kBlock, 256);
    std::vector<uint64_t> keys(64);
    for (auto& k : keys) k = rng();
    summary->add(keys.data(), keys.size());
    summaries.push_back(summary);
    return RoutedEngine{name, model, sys.spawn(instant_engine, name), summary, nullptr};
  };
  for (int i = 0; i < 200; ++i) init.engines.push_back(engine("m-" + std::to_string(1000 + i), "m"));
  for (int i = 0; i < 3; ++i) init.engines.push_back(engine("x-" + std::to_string(i), "x"));
  auto router = spawn_router(sys, std::move(init));
  caf::scoped_actor self{sys};

  uint64_t next_id = 1;
  auto prompt = [&] {
    std::vector<int32_t> p(4 * kBlock + 1);
    for (auto& t : p) t = int32_t(rng() % 256);
    return p;
  };
  auto served_by = [&](const std::vector<int32_t>& tokens, const std::string& model) {
    GenerateRequest req;
    req.id = next_id++;
    req.prompt = tokens;
    req.model = model;
    std::string engine;
    self->request(router, std::chrono::seconds(10), generate_atom::value, std::move(req))
        .receive([&](GenerateResult& r) { engine = r.error.empty() ? r.engine : "error: " + r.error; },
                 [&](caf::error& e) { engine = "error: " + sys.render(e); });
    return engine;
  };
  // The prompt's first three blocks published on one engine picked at random: the router finds it.
  auto publish = [&](size_t engine_index, const std::vector<int32_t>& tokens) {
    std::vector<uint64_t> keys;
    extend_prefix_block_keys(cache_namespace("", ""), tokens, 3 * kBlock, kBlock, keys);
    REQUIRE(keys.size() == 3);
    summaries[engine_index]->add(keys.data(), keys.size());
  };
  for (int trial = 0; trial < 5; ++trial) {
    const size_t holder = size_t(rng() % 200);
    const auto p = prompt();
    publish(holder, p);
    CHECK(served_by(p, "m") == "m-" + std::to_string(1000 + holder));
  }
  // Model x's requests go to x's engines alone, a model nobody serves is refused by name.
  for (int i = 0; i < 6; ++i) CHECK(served_by(prompt(), "x").rfind("x-", 0) == 0);
  CHECK(served_by(prompt(), "nobody") == "error: no engine serves model 'nobody'");

  // An engine added holds a prompt: chosen from the next request on.
  auto added_summary = std::make_shared<PrefixSummary>(kBlock, 256);
  summaries.push_back(added_summary);
  const auto p = prompt();
  publish(summaries.size() - 1, p);
  SwapResult added;
  self->request(router, std::chrono::seconds(10), engine_add_atom::value,
                RoutedEngine{"m-added", "m", sys.spawn(instant_engine, std::string("m-added")), added_summary, nullptr})
      .receive([&](SwapResult& r) { added = r; }, [&](caf::error&) {});
  REQUIRE(added.ok);
  CHECK(served_by(p, "m") == "m-added");
  // Replaced by an engine of the same name that holds nothing: the prompt goes elsewhere; removed: never chosen.
  self->request(router, std::chrono::seconds(10), engine_replace_atom::value,
                RoutedEngine{"m-added", "m", sys.spawn(instant_engine, std::string("m-added")), std::make_shared<PrefixSummary>(kBlock, 256), nullptr})
      .receive([&](SwapResult& r) { added = r; }, [&](caf::error&) {});
  REQUIRE(added.ok);
  std::map<std::string, int> chosen;
  for (int i = 0; i < 20; ++i) ++chosen[served_by(p, "m")];
  CHECK(chosen.size() > 1);  // not kept on one engine: no engine holds it any more
  self->request(router, std::chrono::seconds(10), engine_remove_atom::value, std::string("m-added"))
      .receive([&](SwapResult& r) { added = r; }, [&](caf::error&) {});
  REQUIRE(added.ok);
  for (int i = 0; i < 210; ++i) CHECK(served_by(prompt(), "m") != "m-added");

  // Every request's decision is timed: in the router's status (the latest) and its histogram (all).
  const uint64_t asked = next_id - 1;
  nlohmann::json status;
  self->request(router, std::chrono::seconds(10), status_atom::value, std::string())
      .receive([&](StatusJson& j) { status = nlohmann::json::parse(j.json); }, [&](caf::error&) {});
  const auto& d = status.at("decision_us");
  CHECK(d.at("of").get<uint64_t>() == asked);
  CHECK(d.at("p50").get<double>() > 0.0);
  CHECK(d.at("p99").get<double>() >= d.at("p50").get<double>());
  CHECK(d.at("p99").get<double>() < 1e6);  // microseconds, not seconds nor nanoseconds
  const metrics::Family* h = registry.find("tokenhost_router_decision_seconds");
  REQUIRE(h != nullptr);
  CHECK(h->count({}) == asked);
  CHECK(h->sum({}) > 0.0);
  CHECK(h->sum({}) / double(asked) < 0.1);  // seconds
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  sys.await_actors_before_shutdown(false);
}

}  // namespace actors_router_choice_tests
