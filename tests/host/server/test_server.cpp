// A running server: requests flow gateway -> router -> engine -> worker through the plugins; slots are
// swapped while requests run, without losing one or changing a token, and the old library leaves
// memory; bad requests get clear errors; shutdown ends every request.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "test_server.hpp"

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> prompts() {
  std::vector<std::string> p;
  for (int i = 0; i < 12; ++i) p.push_back("prompt number " + std::to_string(i) + std::string(size_t(i * 3), 'x'));
  return p;
}

// Greedy outputs of each prompt run alone: what every later run must reproduce.
std::vector<std::vector<int32_t>> alone(Server& server, uint32_t max_tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts()) {
    auto r = server.generate(request_for(server, p, max_tokens));
    INFO(r.error);
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens.size() == max_tokens);
    out.push_back(r.tokens);
  }
  return out;
}

}  // namespace

TEST_CASE("server: concurrent requests give exactly the tokens each gives alone", "[server]") {
  auto server = make_test_server();
  auto expected = alone(*server, 12);
  std::vector<std::future<GenerateResult>> futures;
  for (int round = 0; round < 3; ++round)
    for (const auto& p : prompts())
      futures.push_back(std::async(std::launch::async, [&, p] { return server->generate(request_for(*server, p, 12)); }));
  for (size_t i = 0; i < futures.size(); ++i) {
    auto r = futures[i].get();
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i % expected.size()]);
  }
  auto status = server->status();
  REQUIRE(status["engines"][0]["sequences"] == 0);
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == status["engines"][0]["kv"]["total_blocks"]);
}

TEST_CASE("server: a small KV cache forces preemption and outputs stay identical", "[server]") {
  auto server = make_test_server("", 12);  // 12 blocks of 8 positions: a few sequences at a time
  auto expected = alone(*server, 20);
  std::vector<std::future<GenerateResult>> futures;
  for (const auto& p : prompts())
    futures.push_back(std::async(std::launch::async, [&, p] { return server->generate(request_for(*server, p, 20)); }));
  for (size_t i = 0; i < futures.size(); ++i) {
    auto r = futures[i].get();
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i]);
  }
  auto status = server->status();
  INFO(status.dump());
  REQUIRE(status["engines"][0]["preemptions"].get<int>() > 0);
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == 12);
}

TEST_CASE("server: swapping router, scheduler and attention under load loses nothing and unloads the old library",
          "[server][swap]") {
  auto server = make_test_server();
  auto expected = alone(*server, 16);

  std::atomic<bool> stop{false};
  std::atomic<int> done{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      auto ps = prompts();
      for (size_t i = size_t(c); !stop; i = (i + 1) % ps.size()) {
        auto r = server->generate(request_for(*server, ps[i], 16));
        if (r.finish_reason != "length" || r.tokens != expected[i]) ++wrong;
        ++done;
      }
    });
  }
  auto wait_for_progress = [&] {
    int target = done + 8;
    while (done < target) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  wait_for_progress();

  // Router: the in-tree round robin -> fixture v1 -> fixture v2; v1's library must leave memory.
  REQUIRE_THAT(server->set_slot("", "router", server->register_plugin(fixture("router_v1")), {}), Contains("router.fixture 1.0.0"));
  std::string v1_mapped = server->status()["router"]["router"]["mapped_path"];
  REQUIRE(PluginLibrary::is_mapped(v1_mapped));
  wait_for_progress();
  REQUIRE_THAT(server->set_slot("", "router", server->register_plugin(fixture("router_v2")), {}),
               Contains("router.fixture 1.0.0 -> router.fixture 2.0.0"));
  REQUIRE_FALSE(PluginLibrary::is_mapped(v1_mapped));
  wait_for_progress();

  // Scheduler: fifo -> the C fixture scheduler -> fifo with another chunk size.
  std::string fifo_mapped = server->status()["engines"][0]["scheduler"]["mapped_path"];
  REQUIRE_THAT(server->set_slot("main", "scheduler", server->register_plugin(fixture("good")), {}), Contains("scheduler.fixture"));
  wait_for_progress();
  REQUIRE_FALSE(PluginLibrary::is_mapped(fifo_mapped));
  toml::table chunk;
  chunk.insert("max_prefill_chunk", 4);
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.fifo", chunk), Contains("scheduler.fifo 1.0.0"));
  wait_for_progress();

  // Attention: a new instance of the reference plugin takes the next step.
  REQUIRE_THAT(server->set_slot("main", "attention", "attention.reference", {}), Contains("attention.reference"));
  wait_for_progress();

  stop = true;
  for (auto& t : clients) t.join();
  INFO(done.load() << " requests");
  REQUIRE(wrong == 0);
  REQUIRE(done > 40);
  auto status = server->status();
  REQUIRE(status["engines"][0]["scheduler"]["id"] == "scheduler.fifo");
  REQUIRE(status["router"]["router"]["version"] == "2.0.0");
}

TEST_CASE("server: invalid slot changes are refused with the reason and change nothing", "[server][admin]") {
  auto server = make_test_server();
  auto before = server->status();
  toml::table typo;
  typo.insert("max_prefil_chunk", 3);
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", "scheduler.fifo", typo), Contains("did you mean 'max_prefill_chunk'?"));
  toml::table range;
  range.insert("max_prefill_chunk", 0);
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", "scheduler.fifo", range), Contains("out of range"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", "router.round_robin", {}), Contains("is a router plugin"));
  REQUIRE_THROWS_WITH(server->set_slot("mian", "scheduler", "scheduler.fifo", {}), Contains("did you mean 'main'?"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "schedular", "scheduler.fifo", {}), Contains("did you mean 'scheduler'?"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "moe", "moe.topk", {}), Contains("dense model"));
  REQUIRE_THROWS_WITH(server->unload_slot("main", "attention"), Contains("is required"));
  auto after = server->status();
  REQUIRE(before["engines"] == after["engines"]);
  REQUIRE(server->generate(request_for(*server, "ok", 2)).finish_reason == "length");
}

TEST_CASE("server: spec_decode can be loaded into its empty slot and unloaded", "[server][admin]") {
  auto server = make_test_server();
  REQUIRE(server->status()["engines"][0]["spec_decode"].is_null());
  REQUIRE_THAT(server->set_slot("main", "spec_decode", "spec_decode.ngram", {}), Contains("(none) -> spec_decode.ngram"));
  REQUIRE(server->status()["engines"][0]["spec_decode"]["id"] == "spec_decode.ngram");
  REQUIRE_THAT(server->unload_slot("main", "spec_decode"), Contains("-> (none)"));
  REQUIRE(server->status()["engines"][0]["spec_decode"].is_null());
}

TEST_CASE("server: a kvcache swap on a busy engine is refused; on an idle one it applies", "[server][admin]") {
  auto server = make_test_server();
  toml::table bigger;
  bigger.insert("n_blocks", 64);
  bigger.insert("block_size", 16);
  REQUIRE_THAT(server->set_slot("main", "kvcache", "kvcache.paged", bigger), Contains("kvcache.paged"));
  auto status = server->status();
  REQUIRE(status["engines"][0]["kv"]["total_blocks"] == 64);
  REQUIRE(status["engines"][0]["kv"]["block_size"] == 16);
  REQUIRE(server->generate(request_for(*server, "after the swap", 4)).finish_reason == "length");
}

TEST_CASE("server: bad requests end with an error naming the problem", "[server]") {
  auto server = make_test_server();
  GenerateRequest empty;
  empty.id = server->next_request_id();
  auto r = server->generate(empty);
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("prompt is empty"));
  auto too_long = request_for(*server, std::string(300, 'a'), 4);
  r = server->generate(too_long);
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("holds at most 255"));
  auto bad_token = request_for(*server, "x", 2);
  bad_token.prompt.push_back(100000);
  r = server->generate(bad_token);
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("outside the vocabulary"));
  REQUIRE(server->generate(request_for(*server, "fine", 2)).finish_reason == "length");
}

TEST_CASE("server: shutdown lets running requests finish and refuses new ones", "[server][shutdown]") {
  auto server = make_test_server();
  std::vector<std::future<GenerateResult>> running;
  for (int i = 0; i < 8; ++i)
    running.push_back(std::async(std::launch::async, [&, i] { return server->generate(request_for(*server, "run " + std::to_string(i), 200)); }));
  for (int i = 0; i < 5000 && server->in_flight() < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(server->in_flight() > 0);
  auto started = std::chrono::steady_clock::now();
  server->shutdown(std::chrono::seconds(20));
  REQUIRE(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  for (auto& f : running) {
    REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    auto r = f.get();
    // Each either finished or ended with the shutdown error: none hangs, none is cut silently.
    if (r.finish_reason == "length") REQUIRE(r.tokens.size() == 200);
    else REQUIRE_THAT(r.error, Contains("shutting down"));
  }
  auto late = server->generate(request_for(*server, "late", 2));
  REQUIRE(late.finish_reason == "error");
  REQUIRE_THAT(late.error, Contains("shutting down"));
}

TEST_CASE("server: an MoE model runs its feed-forward through the moe plugin", "[server][moe]") {
  const std::string moe_manifest = R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[models.moe]
seed = 3
dim = 32
n_layers = 2
n_heads = 4
n_kv_heads = 1
ffn_dim = 24
n_experts = 4
n_experts_used = 2

[engines.main]
model = "moe"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 4, n_blocks = 256 } }
scheduler = { plugin = "scheduler.fifo" }
moe = { plugin = "moe.topk" }
)";
  Server server(read_deployment("moe.toml", moe_manifest));
  auto expected = alone(server, 10);
  std::vector<std::future<GenerateResult>> futures;
  for (const auto& p : prompts())
    futures.push_back(std::async(std::launch::async, [&, p] { return server.generate(request_for(server, p, 10)); }));
  for (size_t i = 0; i < futures.size(); ++i) REQUIRE(futures[i].get().tokens == expected[i]);
  REQUIRE(server.status()["engines"][0]["moe"]["id"] == "moe.topk");

  // The same model without its moe slot is refused before anything starts.
  std::string without = moe_manifest.substr(0, moe_manifest.find("moe = {"));
  REQUIRE_THROWS_WITH(read_deployment("moe.toml", without), Contains("a moe plugin is required for an MoE model"));
}
