// The router passes a request's cancel to the one engine that holds it, also when the cancel comes
// before the request: two stand-in engines record what reaches them.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/router.hpp"
#include "eventually.hpp"
#include "harness.hpp"

namespace actors_router_cancel_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using namespace std::chrono_literals;

namespace {

// What reached each stand-in engine, by engine name.
struct Seen {
  std::mutex mutex;
  std::map<std::string, std::set<uint64_t>> generated, cancelled;
  std::set<uint64_t> of(std::map<std::string, std::set<uint64_t>>& m, const std::string& engine) {
    std::lock_guard lock(mutex);
    return m[engine];
  }
};

struct FakeEngineState {
  std::map<uint64_t, caf::typed_response_promise<GenerateResult>> held;
  static inline const char* name = "test.fake_engine";
};

// An engine that holds every request until it is cancelled, then answers it "cancelled".
engine_actor::behavior_type fake_engine(engine_actor::stateful_pointer<FakeEngineState> self, std::string name, Seen* seen) {
  return {
      [=](generate_atom, GenerateRequest req) -> caf::result<GenerateResult> {
        {
          std::lock_guard lock(seen->mutex);
          seen->generated[name].insert(req.id);
        }
        auto rp = self->make_response_promise<GenerateResult>();
        self->state.held[req.id] = rp;
        return rp;
      },
      [=](swap_atom, SlotSwap) -> SwapResult { return {false, "fake"}; },
      [=](status_atom, const std::string&) -> StatusJson { return {"{}"}; },
      [=](cancel_atom, uint64_t id) {
        {
          std::lock_guard lock(seen->mutex);
          seen->cancelled[name].insert(id);
        }
        auto it = self->state.held.find(id);
        if (it == self->state.held.end()) return;
        GenerateResult r;
        r.finish_reason = "cancelled";
        r.engine = name;
        it->second.deliver(r);
        self->state.held.erase(it);
      },
      [=](drain_atom) {},
      [=](retire_atom) {},
      [=](tick_atom) {},
  };
}

}  // namespace

TEST_CASE("router: a cancel reaches only the engine that holds the request", "[router][cancel]") {
  caf::actor_system_config cfg;
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  Seen seen;
  RouterInit init;
  init.router = make_plugin("router.round_robin", model_spec());
  for (const char* name : {"a", "b"}) init.engines.push_back({name, "m", sys.spawn(fake_engine, std::string(name), &seen), nullptr, nullptr});
  auto router = spawn_router(sys, std::move(init));

  std::mutex results_mutex;
  std::map<uint64_t, GenerateResult> results;
  auto send = [&](uint64_t id) {
    GenerateRequest req;
    req.id = id;
    req.prompt = {1, 2, 3};
    req.model = "m";
    sys.spawn([&, id, router](caf::event_based_actor* self, GenerateRequest r) {
      self->request(router, caf::infinite, generate_atom::value, std::move(r)).then([&, id](GenerateResult& out) {
        std::lock_guard lock(results_mutex);
        results[id] = out;
      });
    }, std::move(req));
  };

  // Round robin spreads four requests over both engines; each holds two.
  for (uint64_t id = 1; id <= 4; ++id) send(id);
  REQUIRE(eventually([&] { return seen.of(seen.generated, "a").size() + seen.of(seen.generated, "b").size() == 4; }));
  const auto on_a = seen.of(seen.generated, "a"), on_b = seen.of(seen.generated, "b");
  REQUIRE(on_a.size() == 2);
  REQUIRE(on_b.size() == 2);

  // Cancelling each request reaches its engine and no other; the requests end "cancelled".
  for (uint64_t id = 1; id <= 4; ++id) caf::anon_send(router, cancel_atom::value, id);
  REQUIRE(eventually([&] {
    std::lock_guard lock(results_mutex);
    return results.size() == 4;
  }));
  CHECK(seen.of(seen.cancelled, "a") == on_a);
  CHECK(seen.of(seen.cancelled, "b") == on_b);
  for (const auto& [id, r] : results) {
    CHECK(r.finish_reason == "cancelled");
    CHECK(r.engine == (on_a.count(id) ? "a" : "b"));
  }

  // A cancel that comes before its request is kept and follows it to the engine that takes it.
  caf::anon_send(router, cancel_atom::value, uint64_t(9));
  std::this_thread::sleep_for(50ms);
  CHECK(seen.of(seen.cancelled, "a").count(9) + seen.of(seen.cancelled, "b").count(9) == 0);
  send(9);
  REQUIRE(eventually([&] {
    std::lock_guard lock(results_mutex);
    return results.count(9) == 1;
  }));
  const std::string holder = results.at(9).engine;
  CHECK(seen.of(seen.cancelled, holder).count(9) == 1);
  CHECK(seen.of(seen.cancelled, holder == "a" ? "b" : "a").count(9) == 0);

  // A cancel for a request already answered reaches no engine.
  const size_t before = seen.of(seen.cancelled, "a").size() + seen.of(seen.cancelled, "b").size();
  caf::anon_send(router, cancel_atom::value, uint64_t(1));
  std::this_thread::sleep_for(50ms);
  CHECK(seen.of(seen.cancelled, "a").size() + seen.of(seen.cancelled, "b").size() == before);

  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  sys.await_actors_before_shutdown(false);
}

}  // namespace actors_router_cancel_tests
