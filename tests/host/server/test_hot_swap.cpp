// Live changes under load: 64 client streams run greedy requests while the router, scheduler,
// attention and kvcache plugins are swapped and engines come and go; no request fails or changes a
// token, old libraries leave memory once their last step is done, and a new version that fails its
// checks leaves the old one serving.
#include <catch2/catch.hpp>

#include "captured_log.hpp"
#include "eventually.hpp"
#include "test_server.hpp"

namespace server_hot_swap_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

constexpr int kStreams = 64;
constexpr uint32_t kTokens = 16;

// A retired engine stops once its requests are done; status lists it until then.

}  // namespace

TEST_CASE("hot swap: router, scheduler and attention swapped under 64 streams lose nothing and unload the old library",
          "[server][swap]") {
  auto server = make_test_server();
  SteadyLoad load(*server, outputs_alone(*server, kTokens), kStreams, kTokens);
  load.wait_for(kStreams);

  // Router: the in-tree round robin -> fixture v1 -> fixture v2; v1's library must leave memory once
  // the requests it planned are answered (a plan's later calls, a cascade's escalate(), and the
  // feedback go to the instance that planned it).
  REQUIRE_THAT(server->set_slot("", "router", server->register_plugin(fixture("router_v1")), {}), Contains("router.fixture 1.0.0"));
  std::string v1_mapped = server->status()["router"]["router"]["mapped_path"];
  REQUIRE(PluginLibrary::is_mapped(v1_mapped));
  load.wait_for(kStreams);
  REQUIRE_THAT(server->set_slot("", "router", server->register_plugin(fixture("router_v2")), {}),
               Contains("router.fixture 1.0.0 -> router.fixture 2.0.0"));
  REQUIRE(eventually([&] { return !PluginLibrary::is_mapped(v1_mapped); }, std::chrono::seconds(30)));
  load.wait_for(kStreams);

  // Scheduler: fifo -> the C fixture scheduler -> fifo with another chunk size. The old library is
  // closed once the step that used it is done.
  std::string fifo_mapped = server->status()["engines"][0]["scheduler"]["mapped_path"];
  REQUIRE_THAT(server->set_slot("main", "scheduler", server->register_plugin(fixture("good")), {}), Contains("scheduler.fixture"));
  load.wait_for(kStreams);
  REQUIRE_FALSE(PluginLibrary::is_mapped(fifo_mapped));
  toml::table chunk;
  chunk.insert("max_prefill_chunk", 4);
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.fifo", chunk), Contains("scheduler.fifo 1.0.0"));
  load.wait_for(kStreams);

  // Attention: reference -> cpu_flash -> reference; cpu_flash's library leaves memory after the last.
  REQUIRE_THAT(server->set_slot("main", "attention", "attention.cpu_flash", {}), Contains("attention.cpu_flash"));
  load.wait_for(kStreams);
  std::string flash_mapped = server->status()["engines"][0]["attention"]["mapped_path"];
  REQUIRE(PluginLibrary::is_mapped(flash_mapped));
  REQUIRE_THAT(server->set_slot("main", "attention", "attention.reference", {}), Contains("attention.reference"));
  load.wait_for(kStreams);
  REQUIRE_FALSE(PluginLibrary::is_mapped(flash_mapped));

  load.stop();
  INFO(load.done() << " requests; first wrong: " << load.first_error());
  REQUIRE(load.wrong() == 0);
  REQUIRE(load.done() >= 7 * kStreams);
  auto status = server->status();
  REQUIRE(status["engines"][0]["scheduler"]["id"] == "scheduler.fifo");
  REQUIRE(status["router"]["router"]["version"] == "2.0.0");
  // Each swap's latency, from the call to the first step on the new plugin, is measured and exported.
  REQUIRE(status["engines"][0]["last_worker_swap"]["slot"] == "attention");
  REQUIRE(status["engines"][0]["last_engine_swap"]["slot"] == "scheduler");
  REQUIRE(status["router"]["last_swap"]["slot"] == "router");
  for (const auto* where : {&status["engines"][0]["last_worker_swap"], &status["engines"][0]["last_engine_swap"], &status["router"]["last_swap"]}) {
    double seconds = (*where)["seconds"];
    REQUIRE(seconds > 0);
    REQUIRE(seconds < 10);
  }
  REQUIRE_THAT(server->metrics().prometheus_text(), Contains("tokenhost_swap_latency_seconds_count{engine=\"main\",slot=\"attention\",experiment=\"\",arm=\"\"} 2"));
}

TEST_CASE("hot swap: a kvcache swap under 64 streams starts a new engine and drains the old one", "[server][swap]") {
  auto server = make_test_server();
  SteadyLoad load(*server, outputs_alone(*server, kTokens), kStreams, kTokens);
  load.wait_for(kStreams);
  toml::table layout;
  layout.insert("n_blocks", 160);
  layout.insert("block_size", 16);
  REQUIRE_THAT(server->set_slot("main", "kvcache", "kvcache.paged", layout), Contains("a new engine"));
  // A second kvcache swap waits for the first drain to end.
  try {
    server->set_slot("main", "kvcache", "kvcache.paged", layout);
    FAIL("a second kvcache swap started while the first engine drains");
  } catch (const AdminError& e) {
    REQUIRE(e.http_status == 409);
    REQUIRE_THAT(e.what(), Contains("still draining"));
  }
  auto status = server->status();
  // The old engine keeps only the requests it started; those waiting went to the new engine.
  for (int i = 0; i < 500 && !status["retiring_engines"].empty() && !status["retiring_engines"][0]["retiring"].get<bool>(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    status = server->status();
  }
  if (!status["retiring_engines"].empty()) REQUIRE(status["retiring_engines"][0]["waiting"] == 0);
  REQUIRE(status["engines"][0]["kv"]["block_size"] == 16);
  REQUIRE(status["engines"][0]["kv"]["total_blocks"] == 160);
  REQUIRE(status["engines"][0]["kv"]["dtype"] == "f16");  // the engine's kv_dtype survives the swap
  load.wait_for(2 * kStreams);
  REQUIRE(wait_until_no_engine_retires(*server));
  // Once the drain is over, the next kvcache swap goes through.
  layout.insert_or_assign("n_blocks", 200);
  REQUIRE_THAT(server->set_slot("main", "kvcache", "kvcache.paged", layout), Contains("a new engine"));
  load.wait_for(kStreams);
  REQUIRE(wait_until_no_engine_retires(*server));
  load.stop();
  INFO(load.done() << " requests; first wrong: " << load.first_error());
  REQUIRE(load.wrong() == 0);
  status = server->status();
  REQUIRE(status["engines"].size() == 1);
  REQUIRE(status["engines"][0]["sequences"] == 0);
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == 200);
}

TEST_CASE("hot swap: kvcache.paged to kvcache.prefix and back under 64 streams loses nothing", "[server][swap][prefix]") {
  auto server = make_test_server();
  SteadyLoad load(*server, outputs_alone(*server, kTokens), kStreams, kTokens);
  load.wait_for(kStreams);
  // The retiring engine hands its waiting requests back, cached prefixes and all, while a step
  // computes: that step's report still counts their blocks, which the accounting check must expect.
  CapturedLog log(spdlog::level::warn);
  toml::table layout;
  layout.insert("n_blocks", 256);
  layout.insert("block_size", 4);  // mixed_prompts() share "prompt number ": three blocks of 4
  REQUIRE_THAT(server->set_slot("main", "kvcache", "kvcache.prefix", layout), Contains("a new engine"));
  REQUIRE(wait_until_no_engine_retires(*server));
  load.wait_for(2 * kStreams);
  auto status = server->status();
  REQUIRE(status["engines"][0]["prefix_cache"]["enabled"] == true);
  CHECK(status["engines"][0]["prefix_cache"]["hits"].get<uint64_t>() > 0);
  REQUIRE_THAT(server->set_slot("main", "kvcache", "kvcache.paged", layout), Contains("a new engine"));
  REQUIRE(wait_until_no_engine_retires(*server));
  load.wait_for(kStreams);
  load.stop();
  INFO(load.done() << " requests; first wrong: " << load.first_error());
  REQUIRE(load.wrong() == 0);
  status = server->status();
  REQUIRE(status["engines"][0]["prefix_cache"]["enabled"] == false);
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == 256);
  const auto disagreements = log.lines_with({"blocks in use"});
  INFO((disagreements.empty() ? std::string() : disagreements.front()));
  CHECK(disagreements.empty());
}

TEST_CASE("hot swap: a new version that fails its check leaves the old one serving", "[server][swap]") {
  auto server = make_test_server();
  SteadyLoad load(*server, outputs_alone(*server, kTokens), kStreams, kTokens);
  load.wait_for(kStreams);
  auto before = server->status()["engines"][0]["scheduler"];
  std::string id = server->register_plugin(fixture("check_refuses"));  // scheduler.fifo 9.9.9
  REQUIRE(id == "scheduler.fifo");
  try {
    server->set_slot("main", "scheduler", id, {});
    FAIL("the swap to a plugin whose check refuses went through");
  } catch (const AdminError& e) {
    REQUIRE(e.http_status == 422);
    REQUIRE_THAT(e.what(), Contains("this build refuses every model"));
  }
  REQUIRE(server->status()["engines"][0]["scheduler"] == before);
  load.wait_for(kStreams);
  load.stop();
  INFO("first wrong: " << load.first_error());
  REQUIRE(load.wrong() == 0);
}

TEST_CASE("hot swap: engines added and removed under 64 streams lose nothing", "[server][swap][engines]") {
  auto server = make_test_server();
  SteadyLoad load(*server, outputs_alone(*server, kTokens), kStreams, kTokens);
  load.wait_for(kStreams);

  const std::string second = R"(
[engines.second]
model = "tiny"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 128 } }
scheduler = { plugin = "scheduler.continuous" }
)";
  REQUIRE_THAT(server->add_engines(second, "second.toml"), Contains("added engine second"));
  load.wait_for(2 * kStreams);
  auto status = server->status();
  REQUIRE(status["engines"].size() == 2);
  REQUIRE(status["engines"][1]["name"] == "second");
  REQUIRE(status["engines"][1]["tokens_out"].get<int>() > 0);  // the router sends it requests

  REQUIRE_THAT(server->remove_engine("main", std::chrono::seconds(30)), Contains("removed engine main"));
  status = server->status();
  REQUIRE(status["engines"].size() == 1);
  REQUIRE(status["retiring_engines"].empty());  // remove_engine returns once it has stopped
  load.wait_for(kStreams);

  // The last engine of a model stays.
  try {
    server->remove_engine("second", std::chrono::seconds(1));
    FAIL("the last engine was removed");
  } catch (const AdminError& e) {
    REQUIRE(e.http_status == 409);
    REQUIRE_THAT(e.what(), Contains("last engine serving model 'tiny'"));
  }
  load.stop();
  INFO(load.done() << " requests; first wrong: " << load.first_error());
  REQUIRE(load.wrong() == 0);
}

TEST_CASE("hot swap: malformed engine additions are refused and change nothing", "[server][admin][engines]") {
  auto server = make_test_server();
  auto before = server->status()["engines"];
  auto refused = [&](const std::string& toml, const std::string& why) {
    INFO(toml);
    REQUIRE_THROWS_WITH(server->add_engines(toml, "add.toml"), Contains(why));
    REQUIRE(server->status()["engines"] == before);
  };
  refused("[engines.main]\nmodel = \"tiny\"\n", "engine 'main' exists already");
  refused("[engines.x]\nmodel = \"tiny\"\n", "has no [engines.x.attention] slot");
  refused("[engines.x]\nmodel = \"tine\"\n", "did you mean 'tiny'?");
  refused("[engines.x\n", "add.toml:1");
  refused("[models.y]\ndim = 8\n", "unknown key 'models'");
  // A plugin the catalog does not know yet, then one whose create() fails once it is registered.
  const std::string failing = R"(
[engines.x]
model = "tiny"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 8, n_blocks = 64 } }
scheduler = { plugin = "scheduler.create_fails" }
)";
  refused(failing, "unknown plugin 'scheduler.create_fails'");
  server->register_plugin(fixture("create_fails"));
  refused(failing, "the answer must be 42");
  REQUIRE_THROWS_WITH(server->remove_engine("mian", std::chrono::seconds(1)), Contains("did you mean 'main'?"));
  REQUIRE(server->gateway().generate(request_for(*server, "still serving", 3)).finish_reason == "length");
}

TEST_CASE("hot swap: on an idle engine a swap's latency ends when it is in place, not at the next request",
          "[server][swap]") {
  auto server = make_test_server();
  REQUIRE_THAT(server->set_slot("main", "attention", "attention.cpu_flash", {}), Contains("attention.cpu_flash"));
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.continuous", {}), Contains("scheduler.continuous"));
  // No request has come: both swaps are measured already.
  auto status = server->status();
  REQUIRE(status["engines"][0]["last_worker_swap"]["slot"] == "attention");
  REQUIRE(status["engines"][0]["last_engine_swap"]["slot"] == "scheduler");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // idle time that is not the swaps'
  REQUIRE(server->gateway().generate(request_for(*server, "after", 4)).finish_reason == "length");
  status = server->status();
  for (const char* which : {"last_worker_swap", "last_engine_swap"}) {
    INFO(which);
    const double seconds = status["engines"][0][which]["seconds"];
    REQUIRE(seconds > 0);
    REQUIRE(seconds < 0.5);
  }
  REQUIRE_THAT(server->metrics().prometheus_text(),
               Contains("tokenhost_swap_latency_seconds_count{engine=\"main\",slot=\"attention\",experiment=\"\",arm=\"\"} 1"));
}

}  // namespace server_hot_swap_tests
