// Supervised engines: an engine that stops unasked (its actor or worker killed, a plugin that throws or
// returns what the host's checks refuse) ends its requests with an error naming it, leaves routing,
// shows as down and is rebuilt from its live declaration; a plugin whose faults repeat is quarantined
// (a rebuilt engine falls back to the slot's previous plugin, or stays down until an admin swap repairs
// it); an A/B arm whose engine is down gives its share to the other arms and its report shows the gap;
// shutdown does not wait on requests whose engine is gone; a step past the deadline marks its engine
// hung: its requests end, traffic moves away, and it is rebuilt once the step returns.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "eventually.hpp"
#include "server/engine_handle.hpp"
#include "server/engine_supervisor.hpp"
#include "server/fault_ledger.hpp"
#include "test_server.hpp"

namespace server_supervision_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// test_manifest() with `settings` added to its [server] table, and the faulty scheduler's folder.
std::string with_server_settings(std::string manifest, const std::string& settings) {
  const std::string anchor = "plugins_from_anywhere = true\n";
  manifest.insert(manifest.find(anchor) + anchor.size(),
                  settings + "\nplugin_paths = [\"" + fixture_dir() + "/sched_faulty\", \"" + fixture_dir() + "/kv_faulty\", \"" + fixture_dir() +
                      "/router_faulty\", \"" + fixture_dir() + "/attention_faulty\"]\n");
  return manifest;
}

std::unique_ptr<Server> supervised_server(const std::string& settings, const std::string& extra = "") {
  return std::make_unique<Server>(read_deployment("test.toml", with_server_settings(test_manifest(extra), settings)));
}

// A second engine of the test model, beside test_manifest()'s "main".
const std::string kSecondEngine = R"(
[engines.second]
model = "tiny"
max_step_tokens = 64
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 8, n_blocks = 256 } }
scheduler = { plugin = "scheduler.fifo" }
)";

// Samples /health's state every few milliseconds while it lives.
class HealthWatch {
 public:
  explicit HealthWatch(Server& server)
      : thread_([this, &server] {
          while (!stop_) {
            const auto state = server.gateway().health().state;
            {
              std::lock_guard lock(mutex_);
              seen_.insert(state);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
          }
        }) {}
  ~HealthWatch() {
    stop_ = true;
    thread_.join();
  }
  bool saw(Gateway::Health::State s) {
    std::lock_guard lock(mutex_);
    return seen_.count(s) > 0;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::set<Gateway::Health::State> seen_;
  std::thread thread_;
};

// Runs n requests at once (max_tokens each); every one must end, with "length" or an error, within
// `limit`. Returns their results.
std::vector<GenerateResult> run_streams(Server& server, int n, uint32_t max_tokens, std::chrono::seconds limit = std::chrono::seconds(30)) {
  std::vector<std::future<GenerateResult>> running;
  for (int i = 0; i < n; ++i)
    running.push_back(std::async(std::launch::async, [&server, i, max_tokens] {
      return server.gateway().generate(request_for(server, "stream " + std::to_string(i) + " says hello", max_tokens));
    }));
  std::vector<GenerateResult> out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto& f : running) {
    REQUIRE(f.wait_until(deadline) == std::future_status::ready);  // no request hangs
    out.push_back(f.get());
  }
  return out;
}

std::vector<int32_t> greedy(Server& server, uint32_t max_tokens = 12) {
  const GenerateResult r = server.gateway().generate(request_for(server, "the same prompt each time", max_tokens));
  INFO(r.error);
  REQUIRE(r.finish_reason == "length");
  return r.tokens;
}

// The plugin's entry in GET /admin/plugins' faults (an empty object when it has not faulted).
json quarantine_entry(Server& server, const std::string& plugin) {
  const json plugins = server.plugins();
  for (const auto& f : plugins["faults"])
    if (f["plugin"] == plugin) return f;
  return json::object();
}

}  // namespace

TEST_CASE("supervision: the fault ledger quarantines a plugin whose faults repeat within its window", "[server][supervision]") {
  FaultLedger ledger(3, std::chrono::seconds(60));
  const PluginCallSite site{"scheduler.x", "1.0.0", "scheduler", "main", "schedule"};
  const auto t0 = FaultLedger::Clock::now();
  CHECK_FALSE(ledger.record(PluginFault("boom 1", site), "main", t0));
  CHECK_FALSE(ledger.record(PluginFault("boom 2", site), "main", t0 + std::chrono::seconds(61)));  // the first aged out
  CHECK_FALSE(ledger.record(PluginFault("boom 3", site), "main", t0 + std::chrono::seconds(62)));
  CHECK_FALSE(ledger.quarantined("scheduler.x", "1.0.0"));
  CHECK(ledger.record(PluginFault("boom 4", site), "other", t0 + std::chrono::seconds(63)));
  CHECK(ledger.quarantined("scheduler.x", "1.0.0"));
  CHECK_FALSE(ledger.quarantined("scheduler.x", "1.0.1"));  // another version is another plugin
  const json j = ledger.json();
  REQUIRE(j.size() == 1);
  CHECK(j[0]["faults"] == 4);
  CHECK(j[0]["last_error"] == "boom 4");
  CHECK(j[0]["last_engine"] == "other");
  CHECK(ledger.release("scheduler.x"));
  CHECK_FALSE(ledger.quarantined("scheduler.x", "1.0.0"));
}

TEST_CASE("supervision: an engine whose actor or worker stops unasked ends its requests, shows as down, and is rebuilt",
          "[server][supervision]") {
  // Two engines of one model. One of them stops as a fault would stop it (its engine actor killed, or
  // its worker): the request it held ends with an error naming it within 5 s, later requests go to the
  // other, and health, status and /metrics say which engine is down and why; the supervisor rebuilds
  // it (after restart_delay_ms) and it serves the same greedy text as before.
  for (const bool worker : {false, true}) {
    DYNAMIC_SECTION((worker ? "the worker stops" : "the engine actor stops")) {
      auto server = supervised_server("restart_delay_ms = 2000", kSecondEngine);
      const std::vector<int32_t> before = greedy(*server);
      std::vector<std::future<GenerateResult>> running;
      for (int i = 0; i < 2; ++i)  // round robin: one on each engine
        running.push_back(std::async(std::launch::async, [&] { return server->gateway().generate(request_for(*server, "a long one", 200)); }));
      auto main = std::dynamic_pointer_cast<LocalEngine>(server->engines().find("main"));
      REQUIRE(main != nullptr);
      REQUIRE(eventually([&] { return server->status()["engines"][0]["sequences"] == 1; }));
      const auto killed_at = std::chrono::steady_clock::now();
      if (worker) caf::anon_send_exit(main->worker(), caf::exit_reason::kill);
      else caf::anon_send_exit(main->actor(), caf::exit_reason::kill);
      std::vector<GenerateResult> results;
      for (auto& f : running) results.push_back(f.get());
      const double ended_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
      const auto failed = std::count_if(results.begin(), results.end(), [](const GenerateResult& r) { return r.finish_reason == "error"; });
      CHECK(failed == 1);
      for (const auto& r : results)
        if (r.finish_reason == "error") CHECK_THAT(r.error, Contains("engine main stopped"));  // the engine's words or the router's
      CHECK(ended_s < 5);
      for (int i = 0; i < 4; ++i) {  // every later request goes to the engine that serves
        const GenerateResult r = server->gateway().generate(request_for(*server, "after", 6));
        CHECK(r.finish_reason == "length");
        CHECK(r.engine == "second");
      }
      // The supervisor takes it up within its 100 ms look.
      REQUIRE(eventually([&] { return server->status()["engines"][0]["state"] == "restarting"; }));
      const Gateway::Health h = server->gateway().health();
      CHECK(h.state == Gateway::Health::State::degraded);
      REQUIRE(h.down_engines.size() == 1);
      CHECK(h.down_engines[0].engine == "main");
      CHECK(h.down_engines[0].state == "restarting");
      // Admission weighs requests against the pools that serve: second's alone while main is down.
      CHECK(server->engines().kv_positions_of("tiny") == server->engines().find("second")->facts().kv_positions);
      // The engine's own reason: the kill, or (its worker killed) the reply it waited on from the worker
      // that failed, whichever reached it first.
      CHECK_THAT(h.down_engines[0].reason, Contains("kill") || Contains(worker ? "request_receiver_down" : "kill"));
      const auto status = server->status();
      CHECK(status["engines"][0]["state"] == "restarting");
      CHECK(status["engines"][0]["recovery"]["attempts"] == 0);
      CHECK(status["engines"][1]["state"] == "serving");
      CHECK_THAT(server->prometheus_text(), Contains("tokenhost_engine_up{engine=\"main\",experiment=\"\",arm=\"\"} 0"));
      CHECK_THAT(server->prometheus_text(), Contains("tokenhost_engine_up{engine=\"second\",experiment=\"\",arm=\"\"} 1"));
      // Rebuilt within 10 s of the stop: serving again, the same text, counted.
      REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
      CHECK(std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(10));
      CHECK(server->status()["engines"][0]["state"] == "serving");
      CHECK(server->engines().find("main") != main);
      CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 1);
      CHECK_THAT(server->prometheus_text(), Contains("tokenhost_engine_up{engine=\"main\",experiment=\"\",arm=\"\"} 1"));
      std::set<std::string> engines;
      for (int i = 0; i < 4; ++i) {
        const GenerateResult r = server->gateway().generate(request_for(*server, "the same prompt each time", 12));
        CHECK(r.tokens == before);
        engines.insert(r.engine);
      }
      CHECK(engines.count("main") == 1);  // round robin reaches the rebuilt engine
    }
  }
}

TEST_CASE("supervision: a scheduler that throws under 16 streams: no request hangs, the engine comes back, "
          "and once quarantined the slot falls back to its previous plugin",
          "[server][supervision]") {
  auto server = supervised_server("restart_delay_ms = 50");
  const std::vector<int32_t> before = greedy(*server);
  // The operator swaps in a scheduler with a bug: each of its instances throws from its 20th schedule().
  toml::table config;
  config.insert("fault", "throw");
  config.insert("fault_on_call", 20);
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.faulty", config), Contains("scheduler.faulty"));
  HealthWatch health(*server);
  int faulted = 0;
  for (int round = 0; round < 6 && !quarantine_entry(*server, "scheduler.faulty").value("quarantined", false); ++round) {
    for (const auto& r : run_streams(*server, 16, 24)) {
      if (r.finish_reason == "length") continue;
      ++faulted;
      INFO(r.error);
      CHECK(r.finish_reason == "error");
      // In the plugin's words, naming it, its slot, the engine and the call.
      CHECK_THAT(r.error, Contains("plugin scheduler.faulty 1.0.0 (slot scheduler, engine main) threw from schedule") ||
                              Contains("engine main stopped") || Contains("no engine") || Contains("not taking requests"));
    }
    // Back within 10 s (it may be quarantined and rebuilt with its previous scheduler by then).
    REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
  }
  CHECK(faulted > 0);
  const json q = quarantine_entry(*server, "scheduler.faulty");
  REQUIRE(q.contains("quarantined"));
  CHECK(q["quarantined"] == true);
  CHECK(q["faults"] == 3);
  CHECK(q["last_call"] == "schedule");
  CHECK_THAT(q["last_error"].get<std::string>(), Contains("vendor bug: index out of range in schedule()"));
  CHECK_THAT(server->prometheus_text(), Contains("tokenhost_plugin_quarantined{plugin=\"scheduler.faulty\",version=\"1.0.0\"} 1"));
  CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 3);
  CHECK(health.saw(Gateway::Health::State::failing));  // its only engine down: the model had none
  // The rebuilt engine runs its last good scheduler, serves the same text, and the quarantined plugin
  // stays out: 16 more streams all complete.
  CHECK(server->status()["engines"][0]["scheduler"]["id"] == "scheduler.fifo");
  CHECK(server->engines().find("main")->decl().slots.at("scheduler").plugin == "scheduler.fifo");
  CHECK(greedy(*server) == before);
  for (const auto& r : run_streams(*server, 16, 24)) CHECK(r.finish_reason == "length");
  CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 3);
}

TEST_CASE("supervision: a scheduler that returns garbage from the start is quarantined, the engine stays down, "
          "and an admin swap repairs it",
          "[server][supervision]") {
  auto reference = make_test_server();
  const std::vector<int32_t> before = greedy(*reference);
  reference.reset();
  auto server = std::make_unique<Server>(read_deployment(
      "test.toml", [] {
        std::string m = with_server_settings(test_manifest(), "restart_delay_ms = 50");
        const std::string fifo = R"(scheduler = { plugin = "scheduler.fifo", config = { max_prefill_chunk = 16 } })";
        m.replace(m.find(fifo), fifo.size(), R"(scheduler = { plugin = "scheduler.faulty", config = { fault = "garbage", fault_on_call = 3 } })");
        return m;
      }()));
  for (int round = 0; round < 3; ++round) {
    for (const auto& r : run_streams(*server, 4, 16)) {
      if (r.finish_reason == "length") continue;
      CHECK(r.finish_reason == "error");
      CHECK_THAT(r.error, Contains("scheduler error: scheduler.faulty scheduled unknown sequence") || Contains("engine main") ||
                              Contains("no engine") || Contains("not taking requests"));
    }
    if (round < 2) REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
  }
  // Three faults: quarantined, and the slot held nothing else: the engine stays down, and says why.
  REQUIRE(eventually([&] { return server->status()["engines"][0]["state"] == "quarantined"; }, std::chrono::seconds(10)));
  const json status = server->status()["engines"][0];
  CHECK_THAT(status["recovery"]["last_error"].get<std::string>(), Contains("scheduler.faulty 1.0.0 is quarantined"));
  CHECK_THAT(status["recovery"]["last_error"].get<std::string>(), Contains("swap a plugin into scheduler"));
  const Gateway::Health h = server->gateway().health();
  CHECK(h.state == Gateway::Health::State::failing);
  REQUIRE(h.down_engines.size() == 1);
  CHECK(h.down_engines[0].state == "quarantined");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // no restart loop
  CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 2);
  const GenerateResult refused = server->gateway().generate(request_for(*server, "while down", 4));
  CHECK(refused.finish_reason == "error");
  // The repair: an admin swap into the slot rebuilds the engine with the new plugin.
  const std::string what = server->set_slot("main", "scheduler", "scheduler.fifo", toml::table{{"max_prefill_chunk", 16}});
  CHECK_THAT(what, Contains("rebuilt with scheduler -> scheduler.fifo"));
  CHECK(server->gateway().health().state == Gateway::Health::State::ok);
  CHECK(server->status()["engines"][0]["state"] == "serving");
  CHECK(greedy(*server) == before);
}

TEST_CASE("supervision: a kvcache that throws inside the worker's step: the engine stops, comes back, and once "
          "quarantined stays down until an admin swap of its kvcache repairs it",
          "[server][supervision]") {
  const std::vector<int32_t> before = greedy(*make_test_server());
  auto server = std::make_unique<Server>(read_deployment("test.toml", [] {
    std::string m = with_server_settings(test_manifest(), "restart_delay_ms = 50");
    const std::string paged = R"(kvcache = { plugin = "kvcache.paged", config = { block_size = 8, n_blocks = 256 } })";
    m.replace(m.find(paged), paged.size(), R"(kvcache = { plugin = "kvcache.faulty", config = { block_size = 8, n_blocks = 256, fault_on_call = 60 } })");
    return m;
  }()));
  int faulted = 0;
  for (int round = 0; round < 3; ++round) {
    for (const auto& r : run_streams(*server, 16, 24)) {
      if (r.finish_reason == "length") continue;
      ++faulted;
      INFO(r.error);
      CHECK(r.finish_reason == "error");
      CHECK_THAT(r.error, Contains("plugin kvcache.faulty 1.0.0 (slot kvcache, engine main) threw from seq_reserve: vendor bug") ||
                              Contains("no engine") || Contains("not taking requests"));
    }
    if (round < 2) REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
  }
  CHECK(faulted > 0);
  REQUIRE(eventually([&] { return server->status()["engines"][0]["state"] == "quarantined"; }, std::chrono::seconds(10)));
  CHECK(quarantine_entry(*server, "kvcache.faulty")["last_call"] == "seq_reserve");
  CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 2);
  // A kvcache swap on a down engine is a rebuild with the new plugin, as any slot's.
  CHECK_THAT(server->set_slot("main", "kvcache", "kvcache.paged", toml::table{{"block_size", 8}, {"n_blocks", 256}}),
             Contains("rebuilt with kvcache -> kvcache.paged"));
  CHECK(server->gateway().health().state == Gateway::Health::State::ok);
  CHECK(greedy(*server) == before);
  for (const auto& r : run_streams(*server, 16, 24)) CHECK(r.finish_reason == "length");
}

TEST_CASE("supervision: an attention plugin that throws in the step: the engine's requests end naming it, and the "
          "rebuilt engine serves the same text",
          "[server][supervision]") {
  const std::vector<int32_t> before = greedy(*make_test_server());
  auto server = std::make_unique<Server>(read_deployment("test.toml", [] {
    std::string m = with_server_settings(test_manifest(), "restart_delay_ms = 50");
    const std::string reference = R"(attention = { plugin = "attention.reference" })";
    // Each instance's 30th forward() throws: 16 streams reach it; one greedy request of 12 tokens
    // (2 layers: 24 calls) does not.
    m.replace(m.find(reference), reference.size(), R"(attention = { plugin = "attention.faulty", config = { fault_on_call = 30 } })");
    return m;
  }()));
  int faulted = 0;
  for (const auto& r : run_streams(*server, 16, 24)) {
    if (r.finish_reason == "length") continue;
    ++faulted;
    INFO(r.error);
    CHECK(r.finish_reason == "error");
    CHECK_THAT(r.error, Contains("plugin attention.faulty 1.0.0 (slot attention, engine main) threw from forward: vendor bug"));
  }
  CHECK(faulted > 0);
  REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
  CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 1);
  CHECK(greedy(*server) == before);
}

TEST_CASE("supervision: a router that throws ends the request it was routing, naming it, and routes the next ones",
          "[server][supervision]") {
  auto server = supervised_server("restart_delay_ms = 50", kSecondEngine);
  REQUIRE_THAT(server->set_slot("", "router", "router.faulty", toml::table{{"fault_on_call", 3}}), Contains("router.faulty"));
  std::vector<GenerateResult> results;
  for (int i = 0; i < 6; ++i) results.push_back(server->gateway().generate(request_for(*server, "routed", 4)));
  for (int i = 0; i < 6; ++i) {
    INFO(i << ": " << results[i].error);
    if (i == 2) {
      CHECK(results[i].finish_reason == "error");
      CHECK_THAT(results[i].error, Contains("plugin router.faulty 1.0.0 (slot router") && Contains("threw from route: vendor bug"));
    } else {
      CHECK(results[i].finish_reason == "length");
    }
  }
  CHECK(server->gateway().health().state == Gateway::Health::State::ok);  // no engine was touched
}

TEST_CASE("supervision: a scheduler that hangs past the step deadline: its requests end, traffic moves away, "
          "and the engine is rebuilt when the step returns",
          "[server][supervision]") {
  auto server = supervised_server("restart_delay_ms = 50\nstep_deadline_ms = 500", kSecondEngine);
  const std::vector<int32_t> before = greedy(*server);
  toml::table config;
  config.insert("fault", "hang");
  config.insert("fault_on_call", 10);
  config.insert("hang_ms", 4000);
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.faulty", config), Contains("scheduler.faulty"));
  HealthWatch health(*server);
  const auto started = std::chrono::steady_clock::now();
  int hung = 0;
  for (const auto& r : run_streams(*server, 16, 24, std::chrono::seconds(20))) {
    if (r.finish_reason == "length") continue;
    ++hung;
    INFO(r.error);
    CHECK(r.finish_reason == "error");
    CHECK_THAT(r.error, Contains("engine main stopped (a step ran past the step deadline of 500 ms"));
  }
  // Every request ended well before the 4 s hang did: they did not wait for it.
  const double ended_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(hung > 0);
  CHECK(ended_s < 3.5);
  const Gateway::Health h = server->gateway().health();
  CHECK(h.state == Gateway::Health::State::degraded);
  REQUIRE(h.down_engines.size() == 1);
  CHECK(h.down_engines[0].state == "hung");
  CHECK(server->status()["engines"][0]["state"] == "hung");
  CHECK(metric_sum(*server, "tokenhost_engine_hangs_total", "main", "engine") == 1);
  for (int i = 0; i < 4; ++i) {  // traffic goes to the other engine meanwhile
    const GenerateResult r = server->gateway().generate(request_for(*server, "meanwhile", 6));
    CHECK(r.finish_reason == "length");
    CHECK(r.engine == "second");
  }
  // The step returns after 4 s: the engine stops and is rebuilt (with its live declaration, the
  // hanging scheduler; the operator swaps the previous one back).
  REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
  CHECK(std::chrono::steady_clock::now() - started > std::chrono::milliseconds(3500));
  CHECK(metric_sum(*server, "tokenhost_engine_restarts_total", "main", "engine") == 1);
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.fifo", toml::table{{"max_prefill_chunk", 16}}), Contains("scheduler.fifo"));
  for (int i = 0; i < 2; ++i) CHECK(greedy(*server) == before);
  CHECK(health.saw(Gateway::Health::State::degraded));
}

TEST_CASE("supervision: an A/B arm whose engine is down gives its share to the other arm, and the report shows the gap",
          "[server][supervision][experiments]") {
  auto server = supervised_server("restart_delay_ms = 3000", kSecondEngine + R"(
[experiments.ab]
sticky_key = "session"
arms = [{ name = "a", engine = "main", percent = 50 }, { name = "b", engine = "second", percent = 50 }]
)");
  auto second = std::dynamic_pointer_cast<LocalEngine>(server->engines().find("second"));
  REQUIRE(second != nullptr);
  caf::anon_send_exit(second->actor(), caf::exit_reason::kill);
  REQUIRE(eventually([&] { return second->stopped(); }));
  REQUIRE(eventually([&] { return server->experiment_report("ab")["arms"][1]["down"] == true; }));
  for (int i = 0; i < 12; ++i) {  // sessions of both arms: every one is served by main
    GenerateRequest r = request_for(*server, "hello", 4);
    r.session_key = "session-" + std::to_string(i);
    const GenerateResult out = server->gateway().generate(std::move(r));
    INFO(out.error);
    CHECK(out.finish_reason == "length");
    CHECK(out.engine == "main");
  }
  json report = server->experiment_report("ab");
  const json& b = report["arms"][1];
  REQUIRE(b["gaps"].size() == 1);
  CHECK(b["gaps"][0]["to_unix"].is_null());
  CHECK(b["gaps"][0]["displaced_requests"].get<int>() > 0);
  CHECK_THAT(b["gaps"][0]["reason"].get<std::string>(), Contains("kill"));
  CHECK(report["arms"][0]["served_for_down_arms"] == b["gaps"][0]["displaced_requests"]);
  CHECK(report["arms"][0]["requests"].get<int>() + b["gaps"][0]["displaced_requests"].get<int>() == 12);
  CHECK(b["requests"] == 0);
  // Rebuilt: the gap closes and the arm takes its share again.
  REQUIRE(eventually([&] { return server->gateway().health().state == Gateway::Health::State::ok; }, std::chrono::seconds(10)));
  report = server->experiment_report("ab");
  CHECK(report["arms"][1]["down"] == false);
  CHECK(report["arms"][1]["gaps"][0]["to_unix"].is_number());
  std::set<std::string> engines;
  for (int i = 0; i < 12; ++i) {
    GenerateRequest r = request_for(*server, "hello", 4);
    r.session_key = "session-" + std::to_string(i);
    engines.insert(server->gateway().generate(std::move(r)).engine);
  }
  CHECK(engines.count("second") == 1);
}

TEST_CASE("supervision: shutdown does not wait on requests whose engine is gone", "[server][supervision]") {
  auto server = supervised_server("restart_delay_ms = 60000");
  auto main = std::dynamic_pointer_cast<LocalEngine>(server->engines().find("main"));
  REQUIRE(main != nullptr);
  std::vector<std::future<GenerateResult>> running;
  for (int i = 0; i < 4; ++i)
    running.push_back(std::async(std::launch::async, [&] { return server->gateway().generate(request_for(*server, "a long one", 240)); }));
  REQUIRE(eventually([&] { return server->status()["engines"][0]["sequences"] == 4; }));
  caf::anon_send_exit(main->actor(), caf::exit_reason::kill);
  main.reset();  // the actor system's end waits for every handle of its actors
  const auto started = std::chrono::steady_clock::now();
  server->shutdown(std::chrono::seconds(30));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  for (auto& f : running) {
    REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    CHECK(f.get().finish_reason == "error");
  }
}

}  // namespace server_supervision_tests
