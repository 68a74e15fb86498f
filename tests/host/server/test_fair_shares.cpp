// Fair shares at the gateway of a live server (stories260K): API keys (401), the default max_tokens,
// per-client sequences and tokens per minute (429 + Retry-After), KV admission control (503 +
// Retry-After), and a one-sequence client served promptly while another client runs 256 sequences.
#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>
#include <variant>

#include "openai_client.hpp"
#include "prometheus_text.hpp"

namespace server_fair_shares_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using nlohmann::json;

namespace {

const std::string kAlpha = "alpha-key-0001", kBeta = "beta-key-0002";

// stories_manifest() with the gateway's keys and a [limits] table.
std::string manifest_with(const std::string& limits, uint32_t n_blocks = 512) {
  std::string m = stories_manifest("scheduler.continuous", n_blocks);
  const std::string at = "log_level = \"warn\"";
  m.replace(m.find(at), at.size(), at + "\napi_keys = [\"" + kAlpha + "\", \"" + kBeta + "\"]");
  return m + "\n[limits]\n" + limits + "\n";
}

Headers key(const std::string& k) { return {{"Authorization", "Bearer " + k}}; }

const std::string kShort = R"({"prompt": "Once upon a time", "max_tokens": 4})";

// Holds admission as a client of the gateway would (its sequences and tokens count until released).
std::shared_ptr<AdmissionTicket> hold(Server& s, const std::string& client, uint32_t sequences, uint64_t tokens) {
  auto o = s.gateway().admit(AdmissionAsk{client, "stories", sequences, tokens, 0});
  REQUIRE(std::holds_alternative<std::shared_ptr<AdmissionTicket>>(o));
  return std::get<std::shared_ptr<AdmissionTicket>>(o);
}

}  // namespace

TEST_CASE("fair shares: with API keys, a request without one or with an unknown one is a 401", "[fair]") {
  LiveServer s(manifest_with(""));
  for (const auto& [headers, why] : std::vector<std::pair<Headers, std::string>>{
           {{}, "needs an API key"}, {key("not-a-key-at-all"), "unknown API key"}, {{{"Authorization", kAlpha}}, "needs an API key"}}) {
    Answer a = post(s, "/v1/completions", kShort, headers);
    CHECK(a.status == 401);
    CHECK(a.body["error"]["code"] == "invalid_api_key");
    CHECK_THAT(a.body["error"]["message"].get<std::string>(), Catch::Contains(why));
    CHECK(a.headers["www-authenticate"] == "Bearer");
  }
  CHECK(post(s, "/tokenize", R"({"content": "hi"})").status == 401);
  // Health probes need no key, on both ports: /health (live) and /ready (every model has an engine).
  for (int port : {s.http->gateway_port(), s.http->admin_port()})
    for (const auto& [path, status] : std::vector<std::pair<std::string, std::string>>{{"/health", "ok"}, {"/ready", "ready"}}) {
      INFO(port << path);
      HttpClientRequest req;
      req.method = "GET";
      req.target = path;
      auto r = HttpClient("127.0.0.1", port, HttpClientOptions{}).request(req);
      REQUIRE(r.ok());
      CHECK(r.status == 200);
      CHECK(nlohmann::json::parse(r.body)["status"] == status);
    }
  CHECK(post(s, "/v1/completions", kShort, key(kAlpha)).status == 200);
  CHECK(post(s, "/v1/completions", kShort, key(kBeta)).status == 200);
  CHECK_THAT(s.server->metrics().prometheus_text(), Catch::Contains("tokenhost_gateway_refusals_total{reason=\"api_key\"} 4"));
  // Draining: neither live for a balancer nor ready, saying why.
  s.server->drain(std::chrono::seconds(5));
  HttpClientRequest req;
  req.method = "GET";
  for (const char* path : {"/health", "/ready"}) {
    req.target = path;
    auto r = HttpClient("127.0.0.1", s.http->admin_port(), HttpClientOptions{}).request(req);
    REQUIRE(r.ok());
    CHECK(r.status == 503);
    CHECK_THAT(r.body, Catch::Contains("shutting down"));
  }
}

TEST_CASE("fair shares: a request without max_tokens gets the deployment's default", "[fair]") {
  LiveServer s(manifest_with("default_max_tokens = 7"));
  Answer a = post(s, "/v1/completions", R"({"prompt": "Once upon a time", "ignore_eos": true, "temperature": 0})", key(kAlpha));
  REQUIRE(a.status == 200);
  CHECK(a.body["usage"]["completion_tokens"] == 7);
  // Named, it is the client's (within the context).
  a = post(s, "/v1/completions", R"({"prompt": "Once upon a time", "ignore_eos": true, "temperature": 0, "max_tokens": 9})", key(kAlpha));
  CHECK(a.body["usage"]["completion_tokens"] == 9);
}

TEST_CASE("fair shares: a client past its concurrent sequences gets 429 with Retry-After, others do not", "[fair]") {
  LiveServer s(manifest_with("client_max_sequences = 8"));
  auto held = hold(*s.server, "key:" + kAlpha, 6, 100);
  Answer a = post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "n": 3})", key(kAlpha));
  CHECK(a.status == 429);
  CHECK(a.body["error"]["code"] == "client_sequences");
  CHECK(a.body["error"]["type"] == "rate_limit_error");
  CHECK(std::stoi(a.headers.at("retry-after")) >= 1);
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "n": 2})", key(kAlpha)).status == 200);
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "n": 3})", key(kBeta)).status == 200);
  held.reset();
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "n": 3})", key(kAlpha)).status == 200);
  // The request's sequences count only while it runs: done, the client may send as many again.
  CHECK(s.server->status()["admission"]["clients"].value("key:" + kAlpha, json::object()).value("sequences", 0) == 0);
}

TEST_CASE("fair shares: a client past its tokens per minute gets 429 with the seconds until they free", "[fair]") {
  LiveServer s(manifest_with("client_tokens_per_minute = 1000"));
  auto held = hold(*s.server, "key:" + kAlpha, 1, 900);
  Answer a = post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 200})", key(kAlpha));
  CHECK(a.status == 429);
  CHECK(a.body["error"]["code"] == "client_tokens");
  const int retry = std::stoi(a.headers.at("retry-after"));
  CHECK(retry >= 55);
  CHECK(retry <= 60);
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 200})", key(kBeta)).status == 200);
  // Smaller, it fits in what is left of the minute.
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 20})", key(kAlpha)).status == 200);
}

TEST_CASE("fair shares: past the KV pool times the admission factor, 503 with Retry-After", "[fair]") {
  LiveServer s(manifest_with("kv_admission_factor = 1.0", 64));  // 64 blocks of 16: 1024 positions
  auto held = hold(*s.server, "key:" + kBeta, 4, 900);
  Answer a = post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 200})", key(kAlpha));
  CHECK(a.status == 503);
  CHECK(a.body["error"]["code"] == "kv_demand");
  CHECK_THAT(a.body["error"]["message"].get<std::string>(), Catch::Contains("1024"));
  CHECK(a.headers.at("retry-after") == "1");
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 50})", key(kAlpha)).status == 200);
  held.reset();
  CHECK(post(s, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 200})", key(kAlpha)).status == 200);
  CHECK_THAT(s.server->metrics().prometheus_text(), Catch::Contains("tokenhost_gateway_refusals_total{reason=\"kv_demand\"} 1"));
}

TEST_CASE("fair shares: a 1-sequence client's first token comes within 3 engine steps while another client runs 256",
          "[fair][measured]") {
  LiveServer s(manifest_with(""));
  // The heavy client: 16 streams of 16 choices, long outputs, more than the KV pool holds at once.
  std::vector<std::thread> heavy;
  struct JoinAll {  // a failed REQUIRE leaves the test with the heavy client's threads joined, not running
    std::vector<std::thread>& threads;
    ~JoinAll() {
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } join_heavy{heavy};
  std::atomic<int> heavy_ok{0};
  for (int i = 0; i < 16; ++i) {
    heavy.emplace_back([&, i] {
      json body = {{"prompt", "Once upon a time " + std::to_string(i)}, {"n", 16}, {"max_tokens", 160}, {"ignore_eos", true}};
      Streamed r = stream(s, "/v1/completions", body, 0, key(kAlpha));
      heavy_ok += r.status == 200 && r.done && r.error.empty();
    });
  }
  // Until each of its 256 sequences has had its first token: from then on every first token the engine
  // counts is the small client's.
  const std::string labels = "{engine=\"main\",experiment=\"\",arm=\"\"";
  auto metric = [&](const std::string& series) { return prometheus_value(s.server->metrics().prometheus_text(), series); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (metric("tokenhost_time_to_first_token_seconds_count" + labels + "}") < 256 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string within3 = "tokenhost_time_to_first_token_steps_bucket" + labels + ",le=\"3\"}";
  const std::string all = "tokenhost_time_to_first_token_steps_count" + labels + "}";
  const double within3_before = metric(within3), all_before = metric(all);
  REQUIRE(all_before >= 256);
  std::vector<double> ttft;
  for (int i = 0; i < 20; ++i) {
    Streamed r = stream(s, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 2}, {"ignore_eos", true}}, 0,
                        key(kBeta));
    REQUIRE(r.status == 200);
    REQUIRE(r.first_text_s >= 0);
    ttft.push_back(r.first_text_s);
  }
  const double within3_after = metric(within3), all_after = metric(all);
  const int64_t running_after = s.engine_status().value("sequences", 0);
  for (auto& t : heavy) t.join();
  CHECK(heavy_ok == 16);
  CHECK(running_after > 0);  // the heavy client still ran when the last small request ended
  std::sort(ttft.begin(), ttft.end());
  INFO("light client TTFT p50 " << ttft[10] << " s, p95 " << ttft[18] << " s; first tokens within 3 steps: "
                                << within3_after - within3_before << " of " << all_after - all_before);
  CHECK(ttft[18] < 1.0);
  CHECK(all_after - all_before == 20);
  CHECK(within3_after - within3_before == 20);
}

}  // namespace server_fair_shares_tests
