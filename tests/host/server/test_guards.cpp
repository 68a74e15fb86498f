// The router's guards in a running server: an engine made to fail (attention.flaky, a fixture that
// fails while a file exists) opens its circuit breaker and leaves routing while the other engine serves
// everything; once it recovers, a half-open probe closes it and it serves again; a model whose only
// engine's breaker is open is answered 503 with Retry-After. Overload: with every engine full for the
// lowest class, its requests are shed (503, Retry-After, the reason) while the highest class keeps its
// latency; a group's request goes to its cheaper member instead when the policy says so. The policies
// change live (Server::change_guards, what PATCH /admin/guards calls), whole or not at all.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "eventually.hpp"
#include "test_server.hpp"

namespace server_guards_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A file whose presence makes attention.flaky fail (or lag); removed when it goes out of scope.
class Switch {
 public:
  explicit Switch(const std::string& what) : path_(fs::temp_directory_path() / ("tokenhost-guards-" + what + "-" + std::to_string(::getpid()))) {
    fs::remove(path_);
  }
  ~Switch() { fs::remove(path_); }
  void on() { std::ofstream(path_) << "on\n"; }
  void off() { fs::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string manifest_with(const std::string& engines, const std::string& tail) {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugin_paths = [")" + fixture_dir() + R"(/attention_flaky"]
)" + tiny_model_toml() + engines + tail;
}

std::string engine(const std::string& name, const std::string& attention, uint32_t max_step_seqs = 16, const std::string& model = "tiny") {
  return "\n[engines." + name + "]\nmodel = \"" + model + "\"\nmax_step_tokens = 64\nmax_step_seqs = " + std::to_string(max_step_seqs) +
         "\nattention = " + attention +
         "\nkvcache = { plugin = \"kvcache.paged\", config = { block_size = 8, n_blocks = 256 } }"
         "\nscheduler = { plugin = \"scheduler.fifo\", config = { max_prefill_chunk = 16 } }\n";
}

std::string flaky(const Switch& fail, const Switch* slow = nullptr, int slow_ms = 0) {
  std::string config = "fail_while = \"" + fail.path() + "\"";
  if (slow) config += ", slow_while = \"" + slow->path() + "\", slow_ms = " + std::to_string(slow_ms);
  return "{ plugin = \"attention.flaky\", config = { " + config + " } }";
}

const char* kReference = "{ plugin = \"attention.reference\" }";

std::string breaker_state(Server& server, const std::string& engine) {
  const json guards = server.guards();
  for (const auto& b : guards["breakers"]["engines"])
    if (b["engine"] == engine) return b["state"];
  return "none";
}

GenerateResult run(Server& server, const std::string& prompt, uint32_t max_tokens, const std::string& cls = "", const std::string& model = "") {
  GenerateRequest r = request_for(server, prompt, max_tokens);
  r.request_class = cls;
  r.model = model;
  return server.gateway().generate(std::move(r));
}

}  // namespace

TEST_CASE("guards: an engine made to fail opens its breaker, leaves routing, and closes again after a probe once it recovers", "[server][guards]") {
  Switch fail("fail");
  Server server(read_deployment("test.toml", manifest_with(engine("flaky", flaky(fail)) + engine("steady", kReference),
                                                           "\n[router]\nplugin = \"router.round_robin\"\n"
                                                           "\n[breakers]\nfailures = 2\nopen_ms = 400\nprobes = 1\n")));
  // Healthy: both engines serve.
  std::set<std::string> served;
  for (int i = 0; i < 4; ++i) {
    auto r = run(server, "hello " + std::to_string(i), 4);
    REQUIRE(r.finish_reason == "length");
    served.insert(r.engine);
  }
  CHECK(served == std::set<std::string>{"flaky", "steady"});

  fail.on();
  int failed = 0;
  for (int i = 0; i < 6 && breaker_state(server, "flaky") != "open"; ++i)
    if (run(server, "while failing " + std::to_string(i), 4).finish_reason == "error") ++failed;
  REQUIRE(breaker_state(server, "flaky") == "open");
  CHECK(failed == 2);  // two in a row open it; round robin sent every other request there
  CHECK(metric_sum(server, "tokenhost_breaker_state", "flaky", "engine") == 1);
  CHECK(metric_sum(server, "tokenhost_breaker_opened_total", "flaky", "engine") == 1);
  CHECK(server.status()["router"]["engines"].dump().find("\"open\"") != std::string::npos);
  // Open: every request goes to the steady engine and succeeds, though the flaky one still fails.
  for (int i = 0; i < 6; ++i) {
    auto r = run(server, "while open " + std::to_string(i), 4);
    CHECK(r.finish_reason == "length");
    CHECK(r.engine == "steady");
  }

  // Still failing when its time is up: the probe fails and it opens again.
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  for (int i = 0; i < 4 && breaker_state(server, "flaky") != "open"; ++i) run(server, "probe fails " + std::to_string(i), 4);
  for (int i = 0; i < 4; ++i) run(server, "probe fails again " + std::to_string(i), 4);
  CHECK(metric_sum(server, "tokenhost_breaker_opened_total", "flaky", "engine") == 2);

  // Recovered: after open_ms a probe goes through, succeeds, and the breaker closes.
  fail.off();
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  served.clear();
  for (int i = 0; i < 6; ++i) {
    auto r = run(server, "recovered " + std::to_string(i), 4);
    CHECK(r.finish_reason == "length");
    served.insert(r.engine);
  }
  CHECK(breaker_state(server, "flaky") == "closed");
  CHECK(served.count("flaky") == 1);
  CHECK(metric_sum(server, "tokenhost_breaker_state", "flaky", "engine") == 0);
  server.shutdown();
}

TEST_CASE("guards: a model whose every engine has its breaker open is answered 503 with Retry-After", "[server][guards]") {
  Switch fail("only");
  Server server(read_deployment("test.toml", manifest_with(engine("only", flaky(fail)), "\n[breakers]\nfailures = 1\nopen_ms = 3000\n")));
  fail.on();
  auto first = run(server, "fails", 4);
  CHECK(first.finish_reason == "error");
  CHECK(first.refused_status == 0);
  auto refused = run(server, "refused", 4);
  CHECK(refused.finish_reason == "error");
  CHECK(refused.refused_status == 503);
  CHECK(refused.refused_code == "breaker_open");
  CHECK(refused.retry_after_s >= 1);
  CHECK(refused.retry_after_s <= 3);
  CHECK_THAT(refused.error, Contains("circuit breaker open") && Contains("only"));
  // Turned off live, the breaker closes and the engine is tried again.
  fail.off();
  server.change_guards(json{{"breakers", {{"enabled", false}}}});
  CHECK(run(server, "after", 4).finish_reason == "length");
  server.shutdown();
}

TEST_CASE("guards: under overload the lowest class is shed with 503 while the highest keeps its latency", "[server][guards]") {
  Switch never("never"), slow("slow");
  slow.on();
  // Each step lags 2 x 8 ms (two layers) so that sequences stay in flight; at most 4 sequences a step,
  // so that past 4 in flight the rest wait in the engine's queue.
  Server server(read_deployment("test.toml", manifest_with(engine("main", flaky(never, &slow, 8), 4), R"(
[overload]
classes = [{ name = "batch", shed_at = 0.5 }, { name = "interactive" }]
default_class = "batch"
engine_sequences = 4
retry_after_s = 2
)")));
  auto interactive_ms = [&](int n) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = run(server, "interactive " + std::to_string(i), 12, "interactive");
      REQUIRE(r.finish_reason == "length");
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double alone = interactive_ms(5);
  // A flood of batch requests: 16 clients, each sending one after another. The mutex outlives the
  // clients (they take it after flood() has returned).
  std::mutex m;
  auto flood = [&](std::atomic<bool>& stop, std::atomic<int>& ok, std::atomic<int>& shed, std::string& shed_error, uint32_t& retry) {
    std::vector<std::thread> clients;
    for (int c = 0; c < 16; ++c)
      clients.emplace_back([&, c] {
        for (int i = 0; !stop; ++i) {
          auto r = run(server, "batch " + std::to_string(c) + " " + std::to_string(i), 12);
          if (r.finish_reason == "length") ++ok;
          if (r.refused_status == 503) {
            ++shed;
            std::lock_guard lock(m);
            shed_error = r.error;
            retry = r.retry_after_s;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a client backing off a little
          }
        }
      });
    return clients;
  };
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, shed{0};
  std::string shed_error;
  uint32_t retry = 0;
  auto clients = flood(stop, ok, shed, shed_error, retry);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double guarded = interactive_ms(5);
  stop = true;
  for (auto& t : clients) t.join();
  CHECK(ok > 0);   // batch is served up to its share
  CHECK(shed > 0);  // and refused past it
  CHECK(retry == 2);
  CHECK_THAT(shed_error, Contains("class 'batch'") && Contains("main"));
  CHECK(metric_sum(server, "tokenhost_overload_shed_total", "batch", "class") == double(shed.load()));
  CHECK(server.guards()["overload"]["shed"][0]["requests"] == shed.load());

  // The same flood with shedding off (a live change): the interactive requests queue behind it.
  server.change_guards(json{{"overload", {{"enabled", false}}}});
  stop = false;
  std::atomic<int> ok2{0}, shed2{0};
  clients = flood(stop, ok2, shed2, shed_error, retry);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double unguarded = interactive_ms(5);
  stop = true;
  for (auto& t : clients) t.join();
  CHECK(shed2 == 0);
  INFO("interactive median: alone " << alone << " ms, under a shed flood " << guarded << " ms, under an unguarded flood " << unguarded << " ms");
  CHECK(guarded < 2.0 * alone);
  CHECK(unguarded > 1.5 * guarded);
  server.shutdown();
}

TEST_CASE("guards: with action \"cheaper\" a full member's requests go to the group's cheaper member", "[server][guards]") {
  Switch never("never2"), slow("slow2");
  slow.on();
  Server server(read_deployment("test.toml", manifest_with(engine("big", flaky(never, &slow, 8), 16) + engine("small", kReference, 16, "tiny2"), tiny_model_toml("tiny2") + R"(
[groups.chat]
members = [{ model = "tiny", cost = 10.0, quality = 2.0 }, { model = "tiny2", cost = 1.0, quality = 1.0 }]

[router]
plugin = "router.cost_quality"
config = { min_quality = 2.0, max_quality = 2.0 }

[overload]
action = "cheaper"
classes = [{ name = "free", shed_at = 0.25 }, { name = "paid" }]
default_class = "free"
engine_sequences = 4
)")));
  // Hold the big model full: one sequence in flight is its share for "free" (0.25 x 4).
  auto held = std::async(std::launch::async, [&] { return run(server, "long running", 40, "paid", "chat"); });
  REQUIRE(eventually([&] { return server.status()["router"]["engines"].dump().find("\"in_flight\":1") != std::string::npos; }));
  auto degraded = run(server, "free request", 4, "free", "chat");
  CHECK(degraded.finish_reason == "length");
  CHECK(degraded.model == "tiny2");
  auto paid = run(server, "paid request", 4, "paid", "chat");
  CHECK(paid.finish_reason == "length");
  CHECK(held.get().finish_reason == "length");
  CHECK(metric_sum(server, "tokenhost_overload_degraded_total", "tiny2", "to") == 1);
  server.shutdown();
}

TEST_CASE("guards: a live change is checked whole before anything changes", "[server][guards]") {
  auto server = make_test_server();
  CHECK(server->guards()["breakers"]["policy"]["enabled"] == false);
  CHECK_THROWS_WITH(server->change_guards(json{{"breakers", {{"enabled", true}}}, {"overload", {{"action", "drop"}}}}), Contains("overload.action"));
  CHECK(server->guards()["breakers"]["policy"]["enabled"] == false);  // the valid half did not apply
  CHECK_THROWS_WITH(server->change_guards(json{{"breaker", {}}}), Contains("no 'breaker'"));
  auto after = server->change_guards(json{{"breakers", {{"enabled", true}, {"failures", 7}}}});
  CHECK(after["breakers"]["policy"]["failures"] == 7);
  // The export carries the guards as they are now.
  CHECK_THAT(server->export_manifest(), Contains("[breakers]") && Contains("failures = 7"));
  server->shutdown();
}

}  // namespace server_guards_tests
