// tokenhost admin export: a deployment changed live (a slot swapped with a config, a plugin registered
// from outside the plugin folders, an engine added and one removed, an experiment started and its
// split changed) is written as a manifest that reads back to the same deployment and serves the same
// greedy text.
#include <catch2/catch.hpp>

#include <filesystem>

#include "manifest/manifest_export.hpp"
#include "test_server.hpp"

namespace server_admin_export_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::string engine_toml(const std::string& name) {
  return "[engines." + name + "]\nmodel = \"tiny\"\nmax_step_tokens = 48\nmax_step_seqs = 8\n"
         "attention = { plugin = \"attention.reference\" }\n"
         "kvcache = { plugin = \"kvcache.paged\", config = { block_size = 8, n_blocks = 128 } }\n"
         "scheduler = { plugin = \"scheduler.fifo\" }\n";
}

std::vector<int32_t> greedy_on(Server& server, const std::string& engine) {
  for (int i = 0; i < 8; ++i) {  // round robin reaches every engine within as many requests
    const GenerateResult r = server.gateway().generate(request_for(server, "one prompt for every engine", 10));
    REQUIRE(r.finish_reason == "length");
    if (r.engine == engine) return r.tokens;
  }
  FAIL("no request reached engine " + engine);
  return {};
}

}  // namespace

TEST_CASE("admin export: a deployment changed live reads back as the same deployment and serves the same text",
          "[server][export]") {
  auto server = make_test_server(engine_toml("second"));
  // Live changes: a swap with a config, an engine added and one removed, a plugin from outside the
  // plugin folders, an experiment started and its split changed.
  server->set_slot("main", "scheduler", "scheduler.static", toml::table{});
  server->add_engines(engine_toml("third"), "admin request");
  server->remove_engine("second", std::chrono::seconds(5));
  const std::string outside = fixture_dir() + "/sched_faulty";
  REQUIRE(server->register_plugin(outside + "/plugin.toml") == "scheduler.faulty");
  server->set_slot("third", "scheduler", "scheduler.faulty", toml::table{{"fault_on_call", 1000000}, {"fault", "garbage"}});
  server->start_experiment(json::parse(R"({"name": "ab", "arms": [{"name": "a", "engine": "main", "percent": 50},
                                                                   {"name": "b", "engine": "third", "percent": 50}]})"));
  server->change_experiment("ab", json::parse(R"({"arms": [{"name": "a", "percent": 70}, {"name": "b", "percent": 30}]})"));
  const std::vector<int32_t> text_main = greedy_on(*server, "main");

  const std::string manifest = server->export_manifest();
  INFO(manifest);
  CHECK_THAT(manifest, Contains("written by tokenhost admin export"));
  const Deployment d = read_deployment("exported.toml", manifest);  // serve's own reader accepts it
  REQUIRE(d.engines.size() == 2);
  CHECK(d.engines.count("second") == 0);
  const EngineDecl& main = d.engines.at("main");
  CHECK(main.slots.at("scheduler").plugin == "scheduler.static");
  CHECK(main.max_step_tokens == 64);
  CHECK(main.slots.at("kvcache").config == server->engines().find("main")->decl().slots.at("kvcache").config);
  const EngineDecl& third = d.engines.at("third");
  CHECK(third.slots.at("scheduler").plugin == "scheduler.faulty");
  CHECK(third.slots.at("scheduler").config["fault_on_call"].value<int64_t>() == 1000000);
  CHECK(third.max_step_tokens == 48);
  // The outside plugin's folder joined plugin_paths; the rest of [server] is as declared.
  const auto& paths = d.server.plugin_paths;
  CHECK(std::find(paths.begin(), paths.end(), outside) != paths.end());
  CHECK(d.server.http_threads == server->deployment().server.http_threads);
  CHECK(d.server.log_level == server->deployment().server.log_level);
  REQUIRE(d.experiments.size() == 1);
  CHECK(d.experiments[0].name == "ab");
  CHECK(d.experiments[0].arms[0].percent == 70);
  CHECK(d.experiments[0].arms[1].engine == "third");
  CHECK(d.models.at("tiny").seed == server->deployment().models.at("tiny").seed);
  CHECK(d.models.at("tiny").spec.info.context_len == server->deployment().models.at("tiny").spec.info.context_len);

  // Restarted from it: the same engines, plugins and experiment, and the same greedy text.
  server->shutdown(std::chrono::seconds(5));
  server.reset();
  auto again = std::make_unique<Server>(read_deployment("exported.toml", manifest));
  CHECK(again->engines().names() == std::vector<std::string>{"main", "third"});
  CHECK(again->status()["engines"][0]["scheduler"]["id"] == "scheduler.static");
  CHECK(again->experiments()["experiments"][0]["arms"][0]["percent"] == 70);
  CHECK(greedy_on(*again, "main") == text_main);
  // And exported again, it is the same manifest but for its time stamp.
  auto body = [](const std::string& m) { return m.substr(m.find("\n\n")); };
  CHECK(body(again->export_manifest()) == body(manifest));
}

}  // namespace server_admin_export_tests
