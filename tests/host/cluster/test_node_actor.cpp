// A worker's node actor admits work only from a head that said hello and proved its name
// (cluster/node_actor.hpp): a peer that skips the handshake and messages a guessed engine, asks for a
// slot change or pings is refused, and no engine is looked up for it. Plaintext here (no identity):
// the proof is the handshake's order, which TLS does not replace.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>

#include "cluster/node_actor.hpp"

namespace cluster_node_actor_tests {

using namespace tokenhost;
using namespace tokenhost::cluster;
using namespace std::chrono_literals;

TEST_CASE("a node actor refuses generate, slot changes and pings from a peer that did not prove its name", "[cluster]") {
  caf::actor_system_config cfg;
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  std::atomic<int> lookups{0}, changes{0};
  NodeInit init;
  init.name = "worker-1";
  init.find_engine = [&](const std::string&) -> std::optional<engine_actor> {
    ++lookups;
    return std::nullopt;
  };
  init.engines = [](const PrefixVersions&) { return std::vector<EngineInfo>{}; };
  init.change_slot = [&](const SlotChange&) {
    ++changes;
    return AdminReply{true, 200, "changed"};
  };
  node_actor node = spawn_node_actor(sys, std::move(init));
  caf::scoped_actor self{sys};

  GenerateRequest req;
  req.id = 7;
  req.prompt = {1, 2, 3};
  req.max_tokens = 4;
  const std::string generate = encode(RemoteGenerate{"main", req});
  auto refused = [&](auto atom, const std::string& bytes) {
    std::string error;
    self->request(node, 5s, atom, bytes)
        .receive([&](std::string&) { error = "answered"; }, [&](caf::error& e) { error = sys.render(e); });
    return error;
  };
  CHECK_THAT(refused(generate_atom::value, generate), Catch::Contains("not a head of this node"));
  CHECK_THAT(refused(slot_atom::value, encode(SlotChange{"main", "scheduler", "scheduler.fifo", ""})), Catch::Contains("not a head of this node"));
  std::string ping_error;
  self->request(node, 5s, ping_atom::value, uint64_t(1), encode(PrefixVersions{}))
      .receive([&](uint64_t, std::string&) { ping_error = "answered"; }, [&](caf::error& e) { ping_error = sys.render(e); });
  CHECK_THAT(ping_error, Catch::Contains("not a head of this node"));
  // A proof without a hello is refused too.
  std::string proof;
  self->request(node, 5s, prove_atom::value, std::string("signature")).receive([&](std::string& r) { proof = r; }, [&](caf::error&) {});
  CHECK(proof == "no hello came first");
  CHECK(lookups == 0);
  CHECK(changes == 0);

  // After hello and proof (plaintext: the name as stated), the same messages are served.
  Hello hello;
  hello.node = "head";
  hello.role = "head";
  hello.nonce = make_nonce();
  std::string welcome;
  self->request(node, 5s, hello_atom::value, encode(hello)).receive([&](std::string& w) { welcome = w; }, [&](caf::error&) {});
  REQUIRE(decode_welcome(welcome).hello.node == "worker-1");
  self->request(node, 5s, prove_atom::value, std::string()).receive([&](std::string& r) { proof = r; }, [&](caf::error&) {});
  REQUIRE(proof.empty());
  std::string answer;
  self->request(node, 5s, generate_atom::value, generate).receive([&](std::string& r) { answer = r; }, [&](caf::error& e) { answer = sys.render(e); });
  CHECK_THAT(decode_result(answer).error, Catch::Contains("engine main does not serve on node worker-1"));
  CHECK(lookups == 1);
  self->request(node, 5s, slot_atom::value, encode(SlotChange{"main", "scheduler", "scheduler.fifo", ""}))
      .receive([&](std::string& r) { answer = r; }, [&](caf::error& e) { answer = sys.render(e); });
  CHECK(decode_admin_reply(answer).ok);
  CHECK(changes == 1);
  self->send_exit(node, caf::exit_reason::user_shutdown);
}

}  // namespace cluster_node_actor_tests
