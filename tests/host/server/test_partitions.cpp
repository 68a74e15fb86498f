// Compute partitions end to end: two engines, each on a partition of its own, answer concurrent
// requests with exactly the tokens one engine on the process-wide pool gives; their steps and a draft
// model's passes compute on their partitions (each partition's job count grows, the process-wide
// pool's does not); status shows the partitions and each engine's.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "test_server.hpp"

namespace server_partitions_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// Engines a and b as the test manifest's main engine, each on its own partition: pinned to one core
// each where the machine has two.
std::string partitioned_manifest() {
  const bool two_cores = std::thread::hardware_concurrency() >= 2;
  std::string engines;
  for (const char* name : {"a", "b"}) {
    engines += std::string("\n[partitions.") + name + "]\n" +
               (two_cores ? std::string("cores = [") + (name[0] == 'a' ? "0" : "1") + "]\n" : "threads = 1\n");
    engines += std::string("[engines.") + name + R"(]
model = "tiny"
partition = ")" + name + R"("
max_step_tokens = 64
max_step_seqs = 16
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 8, n_blocks = 256 } }
scheduler = { plugin = "scheduler.fifo", config = { max_prefill_chunk = 16 } }
)";
    // b drafts with a model of its own: the draft model's passes (on the engine's drafter thread)
    // belong to the partition too. Policy fixed: every step drafts, however slow a loaded machine is.
    if (name[0] == 'b') engines += "draft_policy = \"fixed\"\nspec_decode = { plugin = \"spec_decode.draft\", config = { model = \"draft\" } }\n";
  }
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugins_from_anywhere = true
)" + tiny_model_toml() + tiny_model_toml("draft") + engines;
}

}  // namespace

TEST_CASE("partitions: engines on partitions of their own answer as one engine on the shared pool, side by side", "[server][partitions]") {
  std::vector<std::vector<int32_t>> expected;
  {
    auto shared = make_test_server();
    expected = outputs_alone(*shared, 12);
  }
  Server server(read_deployment("partitions.toml", partitioned_manifest()));
  auto status = server.status();
  REQUIRE(status["partitions"].size() == 2);
  const uint64_t jobs_a = status["partitions"]["a"]["jobs"], jobs_b = status["partitions"]["b"]["jobs"];
  const uint64_t process_jobs = process_compute_pool().jobs();

  std::vector<std::future<GenerateResult>> futures;
  for (int round = 0; round < 3; ++round)
    for (const auto& p : mixed_prompts())
      futures.push_back(std::async(std::launch::async, [&, p] { return server.gateway().generate(request_for(server, p, 12)); }));
  for (size_t i = 0; i < futures.size(); ++i) {
    auto r = futures[i].get();
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i % expected.size()]);
  }

  status = server.status();
  for (const char* name : {"a", "b"}) {
    INFO("partition " << name << ": " << status["partitions"][name].dump());
    REQUIRE(status["partitions"][name]["threads"] == 1);
    REQUIRE(status["partitions"][name]["engines"] == nlohmann::json::array({name}));
    if (std::thread::hardware_concurrency() >= 2) REQUIRE(status["partitions"][name]["cores"] == nlohmann::json::array({name[0] == 'a' ? 0 : 1}));
  }
  // Both engines served (the round-robin router alternates) and computed on their own pools.
  REQUIRE(uint64_t(status["partitions"]["a"]["jobs"]) > jobs_a);
  REQUIRE(uint64_t(status["partitions"]["b"]["jobs"]) > jobs_b);
  for (const auto& e : status["engines"]) REQUIRE(e["partition"] == e["name"]);
  // Nothing of theirs, b's drafts included, ran on the process-wide pool.
  for (const auto& e : status["engines"])
    if (e["name"] == "b") REQUIRE(e["speculation"]["drafts"].get<uint64_t>() > 0);
  REQUIRE(process_compute_pool().jobs() == process_jobs);
}

}  // namespace server_partitions_tests
