// The load generator end to end against a fake OpenAI server in the test: an HttpListener on
// 127.0.0.1 (port chosen by the system) that streams max_tokens SSE chunks, the first after a known
// delay and each next one after another, then a usage chunk and data: [DONE]. Closed loop with
// concurrency 4 and 20 requests; an open loop with a cap; a duration-bounded run; and failures: HTTP
// 400 with a message, malformed SSE data, nothing listening.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/http_listener.hpp"
#include "loadgen/client.hpp"
#include "loadgen/progress.hpp"
#include "loadgen/prompts.hpp"
#include "loadgen/report.hpp"
#include "loadgen/runner.hpp"

namespace loadgen_bench_e2e_tests {

using namespace tokenhost::loadgen;
using nlohmann::json;

namespace {

constexpr int kFirstDelayMs = 50;
constexpr int kTokenDelayMs = 20;

class FakeServer {
 public:
  enum class Mode { ok, bad_request, garbage };

  explicit FakeServer(Mode mode, bool send_usage = true)
      : mode_(mode), send_usage_(send_usage), server_("fake", tokenhost::HttpLimits{}, 2, 4) {
    server_.route("GET", "/v1/models", [](const tokenhost::HttpRequest&, tokenhost::HttpResponse& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})", "application/json");
    });
    server_.route_async("POST", "/v1/completions", [this](std::shared_ptr<tokenhost::HttpExchange> ex) { complete(std::move(ex)); });
    port_ = server_.bind("127.0.0.1", 0);
    server_.start();
  }
  ~FakeServer() { server_.stop(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  int max_in_flight() const { return max_in_flight_; }

 private:
  // On an I/O thread: the chunks are timers on the exchange's strand, not sleeps.
  void complete(std::shared_ptr<tokenhost::HttpExchange> ex) {
    json body = json::parse(ex->request().body);
    {
      std::lock_guard lock(mu_);
      bodies_.push_back(body);
    }
    if (mode_ == Mode::bad_request) {
      tokenhost::HttpResponse res;
      res.status = 400;
      res.set_content(R"({"error":{"message":"max_tokens must be at most 4","type":"invalid_request_error"}})", "application/json");
      return ex->reply(std::move(res));
    }
    const int n = body.at("max_tokens").get<int>();
    const int now = ++in_flight_;
    for (int m = max_in_flight_; now > m && !max_in_flight_.compare_exchange_weak(m, now);) {
    }
    // Counted out once, whether the stream ends or the client leaves.
    auto out = std::make_shared<std::atomic<bool>>(false);
    auto leave = [this, out] {
      if (!out->exchange(true)) --in_flight_;
    };
    ex->on_gone(leave);
    tokenhost::HttpResponse head;
    head.content_type = "text/event-stream";
    ex->start_stream(std::move(head));
    send_chunk(ex, n, 0, leave);
  }

  void send_chunk(std::shared_ptr<tokenhost::HttpExchange> ex, int n, int sent, std::function<void()> leave) {
    const auto delay = std::chrono::milliseconds(sent == 0 ? kFirstDelayMs : kTokenDelayMs);
    ex->post([this, ex, n, sent, leave] {
      std::string out;
      if (mode_ == Mode::garbage) {
        out = "data: {\"choices\": [{\"text\": \"x\"\n\n";
      } else {
        json chunk = {{"object", "text_completion"},
                      {"choices", {{{"index", 0}, {"text", " tok" + std::to_string(sent)},
                                    {"finish_reason", sent + 1 == n ? json("length") : json(nullptr)}}}}};
        out = "data: " + chunk.dump() + "\n\n";
      }
      if (sent + 1 < n && mode_ != Mode::garbage) {
        if (ex->write(std::move(out))) send_chunk(ex, n, sent + 1, leave);
        return;
      }
      if (send_usage_ && mode_ == Mode::ok)
        out += "data: " + json{{"choices", json::array()}, {"usage", {{"prompt_tokens", 11}, {"completion_tokens", n}}}}.dump() + "\n\n";
      out += "data: [DONE]\n\n";
      // Counted out before the end goes out: the client's next request may arrive as soon as it has read it.
      leave();
      ex->write(std::move(out));
      ex->end_stream();
    }, delay);
  }

  Mode mode_;
  bool send_usage_;
  tokenhost::HttpListener server_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<json> bodies_;
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
};

struct Run {
  RunResult result;
  Report report;
};

Run drive(const std::string& url, LoadOptions load, uint32_t output_tokens = 6, LiveCounters* live = nullptr) {
  EndpointOptions ep;
  ep.url = url;
  ep.timeout_s = 20;
  ModelsProbe probe = probe_models(ep);
  REQUIRE(probe.reachable);
  REQUIRE(probe.first_model == "fake-model");
  ep.model = *probe.first_model;
  PromptGenerator prompts(parse_length_distribution("20:40"), parse_length_distribution(std::to_string(output_tokens)), 0.5, 3);
  Run r;
  r.result = run_load(ep, load, [&] { return prompts.next(); }, live);
  r.report = make_report(r.result);
  return r;
}

}  // namespace

TEST_CASE("loadgen: a closed loop against a fake streaming server", "[loadgen]") {
  FakeServer fake(FakeServer::Mode::ok);
  LoadOptions load;
  load.concurrency = 4;
  load.requests = 20;
  load.warmup = 2;
  LiveCounters live;
  Run run = drive(fake.url(), load, 6, &live);
  const Report& rep = run.report;
  INFO(format_table(rep));
  REQUIRE(rep.ok == 20);
  CHECK(rep.failed == 0);
  CHECK(run.result.results.size() == 20);
  CHECK(fake.bodies().size() == 22);  // the warmup requests too
  CHECK(fake.max_in_flight() == 4);
  CHECK(live.done == 20);
  CHECK(live.tokens == 20 * 6);
  for (const auto& b : fake.bodies()) {
    CHECK(b.at("model") == "fake-model");
    CHECK(b.at("stream") == true);
    CHECK(b.at("stream_options").at("include_usage") == true);
    CHECK(b.at("max_tokens") == 6);
    CHECK_FALSE(b.contains("ignore_eos"));
  }
  for (const auto& r : run.result.results) {
    CHECK(r.output_tokens == 6);
    CHECK(r.token_times_s.size() == 6);
    CHECK(r.prompt_tokens == 11u);
    CHECK(r.token_times_s.front() >= kFirstDelayMs / 1e3);
    CHECK(r.latency_s >= r.token_times_s.back());
  }
  CHECK(rep.output_tokens == 120);
  CHECK(rep.input_tokens == 20 * 11);
  CHECK(rep.input_tokens_from_server);
  CHECK(rep.ttft_ms.count == 20);
  CHECK(rep.ttft_ms.min >= kFirstDelayMs);
  CHECK(rep.itl_ms.count == 20 * 5);
  CHECK(rep.itl_ms.p50 >= 0.75 * kTokenDelayMs);
  CHECK(rep.itl_ms.p50 <= 2.5 * kTokenDelayMs);
  CHECK(rep.itl_ms.mean >= 0.9 * kTokenDelayMs);
  CHECK(rep.itl_ms.mean <= 2.5 * kTokenDelayMs);
  // Five rounds of about 50 + 5 * 20 ms each.
  const double one = (kFirstDelayMs + 5 * kTokenDelayMs) / 1e3;
  CHECK(rep.wall_s >= 5 * one);
  CHECK(rep.e2e_ms.min >= 1e3 * one);
  CHECK(rep.request_throughput == Approx(20 / rep.wall_s));
  CHECK(rep.output_throughput == Approx(120 / rep.wall_s));

  json j = to_json(rep, {{"url", fake.url()}});
  for (const char* key : {"requests_ok", "requests_failed", "errors", "wall_time_s", "request_throughput", "output_tokens",
                          "output_throughput", "input_tokens", "input_tokens_source", "ttft_ms", "itl_ms", "e2e_latency_ms",
                          "per_request_output_throughput", "config"})
    CHECK(j.contains(key));
  CHECK(j["ttft_ms"]["p99"].get<double>() == Approx(rep.ttft_ms.p99));
  CHECK(j["input_tokens_source"] == "server");
}

TEST_CASE("loadgen: without a usage chunk the tokens are the chunks with text", "[loadgen]") {
  FakeServer fake(FakeServer::Mode::ok, false);
  LoadOptions load;
  load.concurrency = 2;
  load.requests = 4;
  Run run = drive(fake.url(), load, 3);
  REQUIRE(run.report.ok == 4);
  CHECK(run.report.output_tokens == 12);
  CHECK_FALSE(run.report.input_tokens_from_server);
  uint64_t words = 0;
  for (const auto& r : run.result.results) words += r.prompt_words;
  CHECK(run.report.input_tokens == words);
}

TEST_CASE("loadgen: an open loop with a concurrency cap, and a duration-bounded closed loop", "[loadgen]") {
  FakeServer fake(FakeServer::Mode::ok);
  LoadOptions open;
  open.rate = 40;
  open.max_concurrency = 3;
  open.requests = 12;
  open.seed = 5;
  Run run = drive(fake.url(), open, 4);
  CHECK(run.report.ok == 12);
  CHECK(fake.max_in_flight() <= 3);

  FakeServer fake2(FakeServer::Mode::ok);
  LoadOptions timed;
  timed.concurrency = 2;
  timed.duration_s = 0.4;
  Run run2 = drive(fake2.url(), timed, 2);
  CHECK(run2.report.failed == 0);
  CHECK(run2.report.ok >= 2);
  for (const auto& r : run2.result.results) CHECK(r.start_s < 0.4);
}

TEST_CASE("loadgen: HTTP errors, malformed SSE and an unreachable server are failures with their message", "[loadgen]") {
  {
    FakeServer fake(FakeServer::Mode::bad_request);
    LoadOptions load;
    load.concurrency = 4;
    load.requests = 20;
    Run run = drive(fake.url(), load);
    CHECK(run.report.ok == 0);
    CHECK(run.report.failed == 20);
    REQUIRE(run.report.errors.size() == 1);
    CHECK(run.report.errors[0].first == "HTTP 400: max_tokens must be at most 4");
    CHECK(run.report.errors[0].second == 20);
    CHECK(run.report.ttft_ms.count == 0);
    CHECK(to_json(run.report, {})["ttft_ms"]["p50"].is_null());
    CHECK_THAT(format_table(run.report), Catch::Contains("20 x HTTP 400: max_tokens must be at most 4"));
  }
  {
    FakeServer fake(FakeServer::Mode::garbage);
    LoadOptions load;
    load.concurrency = 2;
    load.requests = 3;
    Run run = drive(fake.url(), load);
    CHECK(run.report.failed == 3);
    REQUIRE_FALSE(run.report.errors.empty());
    CHECK_THAT(run.report.errors[0].first, Catch::StartsWith("malformed SSE data: not JSON: {\"choices\""));
  }
  {
    // Port 1 (tcpmux): nothing listens there.
    EndpointOptions ep;
    ep.url = "http://127.0.0.1:1";
    ModelsProbe probe = probe_models(ep);
    CHECK_FALSE(probe.reachable);
    CHECK(probe.error == "cannot connect to http://127.0.0.1:1 (is a server listening there?)");
    Client client(ep);
    Prompt p;
    p.text = "hello";
    p.max_tokens = 2;
    RequestResult r = client.send(p);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::StartsWith("cannot connect to " + ep.url));
  }
}

TEST_CASE("loadgen: URLs and progress lines", "[loadgen]") {
  Target t = parse_url("http://localhost:8080/v1/");
  CHECK(t.host == "localhost");
  CHECK(t.port == 8080);
  CHECK(t.base_path.empty());
  t = parse_url("http://10.0.0.1/api");
  CHECK(t.port == 80);
  CHECK(t.base_path == "/api");
  CHECK_FALSE(t.tls);
  t = parse_url("https://example.org/v1");
  CHECK(t.tls);
  CHECK(t.port == 443);
  CHECK(t.host == "example.org");
  CHECK(parse_url("https://[::1]:8443").port == 8443);
  CHECK_THROWS_WITH(parse_url("localhost:8080"), "'localhost:8080': expected http[s]://HOST[:PORT][/PREFIX]");
  CHECK_THROWS_WITH(parse_url("http://h:99999"), "'http://h:99999': '99999' is not a port number");
  CHECK(ProgressDisplay::line(5, 1, 10, 2.5, 0, 123.45, false) == "5/10 requests (1 failed), 2.5 s, 123.5 tokens/s");
  CHECK(ProgressDisplay::line(5, 0, 0, 30, 60, 1, true) == "[############............] 5 requests, 30.0/60 s, 1.0 tokens/s");
}

TEST_CASE("loadgen: conversations send each turn with the conversation so far", "[loadgen]") {
  FakeServer fake(FakeServer::Mode::ok);
  EndpointOptions ep;
  ep.url = fake.url();
  ep.timeout_s = 20;
  PromptGenerator prompts(parse_length_distribution("20:40"), parse_length_distribution("4"), 0.0, 9);
  const LengthDistribution turn_words = parse_length_distribution("5");
  LoadOptions load;
  load.concurrency = 2;
  load.requests = 12;
  load.turns = 3;
  RunResult run = run_load(ep, load, [&] { return prompts.next(); }, nullptr, [&] { return prompts.follow_up(turn_words); });
  Report rep = make_report(run);
  REQUIRE(rep.ok == 12);
  std::vector<int> turns(3, 0);
  for (const auto& r : run.results) ++turns.at(r.turn);
  CHECK(turns == std::vector<int>{4, 4, 4});  // two workers, two conversations each
  CHECK(rep.conversations);
  CHECK(rep.ttft_later_turns_ms.count == 8);
  CHECK(to_json(rep, {}).contains("ttft_later_turns_ms"));
  // A turn's prompt: an earlier turn's prompt, the answer it got (the fake's four chunks), a newline,
  // then a new message of 5 words.
  const std::string answer = " tok0 tok1 tok2 tok3";
  std::vector<std::string> sent;
  for (const auto& b : fake.bodies()) sent.push_back(b.at("prompt").get<std::string>());
  std::vector<int> by_newlines(3, 0);
  for (const auto& p : sent) {
    const size_t lines = size_t(std::count(p.begin(), p.end(), '\n'));
    REQUIRE(lines < 3);
    ++by_newlines[lines];
    if (lines == 0) continue;
    const size_t cut = p.rfind('\n');
    const std::string before = p.substr(0, cut), message = p.substr(cut + 1);
    INFO(p);
    CHECK(std::count(message.begin(), message.end(), ' ') == 4);
    CHECK(std::any_of(sent.begin(), sent.end(), [&](const std::string& q) { return q + answer == before; }));
  }
  CHECK(by_newlines == std::vector<int>{4, 4, 4});
  // Conversations need the closed loop and a source of follow-ups.
  LoadOptions open = load;
  open.rate = 10;
  CHECK_THROWS_AS(run_load(ep, open, [&] { return prompts.next(); }, nullptr, [&] { return prompts.follow_up(turn_words); }),
                  std::invalid_argument);
  CHECK_THROWS_AS(run_load(ep, load, [&] { return prompts.next(); }), std::invalid_argument);
}

}  // namespace loadgen_bench_e2e_tests
