// The router tells its plugin where each candidate runs (th_route_request.candidate_nodes and
// candidate_rtt_s, ABI 1.8): router.cache's least-loaded choice (sdk::least_loaded) sends requests to
// the nearest of equally loaded engines, and follows the link's round trip as it changes.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>

#include "actors/router.hpp"
#include "eventually.hpp"
#include "harness.hpp"
#include "instant_engine.hpp"

namespace actors_router_nodes_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

TEST_CASE("router: a router plugin sees each candidate's node and round trip, and the nearest idle engine serves", "[router][cluster]") {
  caf::actor_system_config cfg;
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto rtt_a = std::make_shared<std::atomic<double>>(0.030), rtt_b = std::make_shared<std::atomic<double>>(-1.0);
  RouterInit init;
  init.router = make_plugin("router.cache", model_spec());
  RoutedEngine local{"local", "m", sys.spawn(instant_engine, std::string("local")), nullptr, nullptr};
  RoutedEngine a{"e@worker-a", "m", sys.spawn(instant_engine, std::string("e@worker-a")), nullptr, nullptr};
  a.node = "worker-a";
  a.rtt_s = rtt_a;
  RoutedEngine b{"e@worker-b", "m", sys.spawn(instant_engine, std::string("e@worker-b")), nullptr, nullptr};
  b.node = "worker-b";
  b.rtt_s = rtt_b;
  init.engines = {a, b, local};
  auto router = spawn_router(sys, std::move(init));
  caf::scoped_actor self{sys};
  auto served_by = [&](uint64_t id) {
    GenerateRequest req;
    req.id = id;
    req.prompt = {1, 2, 3};
    req.model = "m";
    req.sampling.temperature = 1.0f;  // not deterministic: never answered from router.cache's cache
    std::string engine;
    self->request(router, std::chrono::seconds(10), generate_atom::value, std::move(req))
        .receive([&](GenerateResult& r) { engine = r.engine; }, [&](caf::error& e) { engine = "error: " + sys.render(e); });
    return engine;
  };
  // One at a time, every engine idle: this process's engine is the nearest.
  for (uint64_t id = 1; id <= 4; ++id) CHECK(served_by(id) == "local");
  // Without it, the measured link wins over the one not yet measured, and the choice follows the
  // round trips as they change.
  caf::anon_send(router, engine_remove_atom::value, std::string("local"));
  REQUIRE(eventually([&] { return served_by(100) != "local"; }));
  for (uint64_t id = 5; id <= 8; ++id) CHECK(served_by(id) == "e@worker-a");
  rtt_b->store(0.002);
  for (uint64_t id = 9; id <= 12; ++id) CHECK(served_by(id) == "e@worker-b");
  rtt_a->store(0.001);
  rtt_b->store(0.004);
  CHECK(served_by(13) == "e@worker-a");
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  sys.await_actors_before_shutdown(false);
}

}  // namespace actors_router_nodes_tests
