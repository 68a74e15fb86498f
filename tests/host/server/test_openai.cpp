// The OpenAI-compatible gateway over HTTP on stories260K: concurrent streams give each request's
// alone text, a client that leaves frees its KV blocks, preempted requests finish unchanged, bad
// input gets a 4xx naming the problem, and a thousand streaming clients are held at once.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "openai_client.hpp"

namespace server_openai_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using nlohmann::json;

namespace {

const char* kNames[] = {"Lily", "Tom", "Sue", "Ben", "Max", "Mia", "Sam", "Tim"};
const char* kThings[] = {"a ball", "a dog", "the park", "a cake", "a tree", "the sea", "a hat", "a box"};

// 64 distinct prompts.
std::vector<std::string> story_prompts(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(std::string("Once upon a time, ") + kNames[i % 8] + " saw " + kThings[(i / 8) % 8]);
  return out;
}

json greedy(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

std::string alone_text(const LiveServer& s, const std::string& prompt, int max_tokens) {
  auto a = post(s, "/v1/completions", greedy(prompt, max_tokens).dump());
  INFO(a.body.dump());
  REQUIRE(a.status == 200);
  return a.body["choices"][0]["text"];
}

// The engine's status once it runs no sequence and every KV block is free, or after 5 s.
json wait_until_idle(LiveServer& s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  json e;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    e = s.engine_status();
  } while ((e["sequences"] != 0 || e["kv"]["free_blocks"] != e["kv"]["total_blocks"]) && std::chrono::steady_clock::now() < deadline);
  return e;
}

double metric(Server& server, const std::string& name, const std::vector<std::string>& labels) {
  auto* f = server.metrics().find(name);
  return f == nullptr ? 0.0 : f->value(labels);
}

}  // namespace

TEST_CASE("openai: 64 concurrent greedy streams each give the text the request gives alone", "[openai]") {
  LiveServer s(stories_manifest());
  auto prompts = story_prompts(64);
  std::vector<std::string> expected;
  for (const auto& p : prompts) expected.push_back(alone_text(s, p, 48));
  std::vector<std::future<Streamed>> streams;
  for (const auto& p : prompts)
    streams.push_back(std::async(std::launch::async, [&s, p] { return stream(s, "/v1/completions", greedy(p, 48)); }));
  for (size_t i = 0; i < streams.size(); ++i) {
    Streamed r = streams[i].get();
    INFO("prompt " << i << ": " << prompts[i] << "; error " << r.error);
    REQUIRE(r.status == 200);
    REQUIRE(r.done);
    REQUIRE(r.text == expected[i]);
    REQUIRE((r.finish_reason == "length" || r.finish_reason == "stop"));
  }
  auto e = s.engine_status();
  REQUIRE(e["kv"]["free_blocks"] == e["kv"]["total_blocks"]);
}

TEST_CASE("openai: chat streams and whole answers agree, with usage", "[openai]") {
  LiveServer s(stories_manifest());
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story about a cat."}}}}, {"max_tokens", 24}, {"temperature", 0}};
  auto whole = post(s, "/v1/chat/completions", body.dump());
  REQUIRE(whole.status == 200);
  REQUIRE(whole.body["object"] == "chat.completion");
  REQUIRE(whole.body["choices"][0]["message"]["role"] == "assistant");
  body["stream_options"] = {{"include_usage", true}};
  Streamed streamed = stream(s, "/v1/chat/completions", body);
  REQUIRE(streamed.done);
  REQUIRE(streamed.text == whole.body["choices"][0]["message"]["content"]);
  REQUIRE(streamed.usage == whole.body["usage"]);
  REQUIRE(whole.body["usage"]["completion_tokens"].get<int>() >= 1);
}

TEST_CASE("openai: stop strings end the text before them and n gives n choices", "[openai]") {
  LiveServer s(stories_manifest());
  const std::string full = alone_text(s, "Once upon a time", 64);
  // The first word of the greedy text after its first few characters: the answer must end right before it.
  size_t cut = full.find(' ', 8);
  REQUIRE(cut != std::string::npos);
  std::string stop = full.substr(cut, 4);
  auto a = post(s, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}, {"stop", {stop}}}.dump());
  REQUIRE(a.status == 200);
  REQUIRE(a.body["choices"][0]["text"] == full.substr(0, full.find(stop)));
  REQUIRE(a.body["choices"][0]["finish_reason"] == "stop");
  // The rest of the sequence is not generated: the engine drops it and frees its blocks.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (metric(*s.server, "tokenhost_requests_total", {"main", "cancelled"}) < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(metric(*s.server, "tokenhost_requests_total", {"main", "cancelled"}) == 1);
  auto e = s.engine_status();
  REQUIRE(e["kv"]["free_blocks"] == e["kv"]["total_blocks"]);

  auto n = post(s, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"n", 3}, {"seed", 5}, {"temperature", 1.0}}.dump());
  REQUIRE(n.status == 200);
  REQUIRE(n.body["choices"].size() == 3);
  for (int i = 0; i < 3; ++i) REQUIRE(n.body["choices"][i]["index"] == i);
  // The same seed gives the same choices again, whole or streamed (the streamed choices woken by
  // whichever of them has a new token).
  auto again = post(s, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"n", 3}, {"seed", 5}, {"temperature", 1.0}}.dump());
  REQUIRE(again.body["choices"] == n.body["choices"]);
  Streamed streamed = stream(s, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"n", 3}, {"seed", 5}, {"temperature", 1.0}});
  REQUIRE(streamed.done);
  REQUIRE(streamed.texts.size() == 3);
  for (int i = 0; i < 3; ++i) REQUIRE(streamed.texts[size_t(i)] == n.body["choices"][i]["text"]);
}

TEST_CASE("openai: a streaming client that disconnects has its sequence cancelled and its KV blocks freed", "[openai]") {
  LiveServer s(stories_manifest());
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0}, {"ignore_eos", true}};
  Streamed r = stream(s, "/v1/completions", body, 3);
  REQUIRE(r.events == 3);
  REQUIRE_FALSE(r.done);
  // The next write to the closed connection fails; the engine drops the sequence at its next step.
  const json e = wait_until_idle(s);
  REQUIRE(e["sequences"] == 0);
  REQUIRE(e["kv"]["free_blocks"] == e["kv"]["total_blocks"]);
  REQUIRE(metric(*s.server, "tokenhost_requests_total", {"main", "cancelled"}) == 1);
  REQUIRE(e["tokens_out"].get<int>() < 400);
}

TEST_CASE("openai: a client that gives up waiting for a non-streamed answer has its sequence cancelled and its KV blocks freed",
          "[openai]") {
  // On attention.reference, 16 choices of 480 tokens take seconds; the client waits for the answer for
  // 100 ms, then closes the connection.
  std::string manifest = stories_manifest();
  manifest.replace(manifest.find("attention.cpu_flash"), std::string("attention.cpu_flash").size(), "attention.reference");
  LiveServer s(manifest);
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"n", 16}, {"temperature", 1}, {"ignore_eos", true}};
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    INFO(path);
    if (std::string(path).find("chat") != std::string::npos) {
      body.erase("prompt");
      body["messages"] = json::array({{{"role", "user"}, {"content", "Tell me a story"}}});
    }
    const double cancelled_before = metric(*s.server, "tokenhost_requests_total", {"main", "cancelled"});
    const int tokens_before = s.engine_status()["tokens_out"].get<int>();
    const auto started = std::chrono::steady_clock::now();
    {
      auto c = s.client();
      c.options().read_timeout = std::chrono::milliseconds(100);
      auto r = c.request("POST", path, body.dump(), "application/json");
      REQUIRE(r.error == HttpClientError::read_timeout);  // no answer within 100 ms: the client gave up
    }
    const json e = wait_until_idle(s);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO("sequences left " << e["sequences"] << " after " << seconds << " s");
    REQUIRE(e["sequences"] == 0);
    REQUIRE(e["kv"]["free_blocks"] == e["kv"]["total_blocks"]);
    REQUIRE(metric(*s.server, "tokenhost_requests_total", {"main", "cancelled"}) == cancelled_before + 16);
    REQUIRE(e["tokens_out"].get<int>() - tokens_before < 16 * 480);  // stopped, not run to the end
  }
  // The server keeps serving.
  REQUIRE(alone_text(s, "Once upon a time", 8).size() > 0);
}

TEST_CASE("openai: preempted requests complete with the same greedy text as undisturbed ones", "[openai]") {
  // 24 blocks of 16 positions: eight 120-token sequences need about twice that.
  LiveServer s(stories_manifest("scheduler.continuous", 24));
  auto prompts = story_prompts(8);
  auto body = [](const std::string& p) { return json{{"prompt", p}, {"max_tokens", 110}, {"temperature", 0}, {"ignore_eos", true}}; };
  std::vector<std::string> expected;
  for (const auto& p : prompts) {
    auto a = post(s, "/v1/completions", body(p).dump());
    REQUIRE(a.status == 200);
    expected.push_back(a.body["choices"][0]["text"]);
  }
  REQUIRE(s.engine_status()["preemptions"] == 0);
  std::vector<std::future<Streamed>> streams;
  for (const auto& p : prompts) streams.push_back(std::async(std::launch::async, [&s, &body, p] { return stream(s, "/v1/completions", body(p)); }));
  for (size_t i = 0; i < streams.size(); ++i) {
    Streamed r = streams[i].get();
    INFO("prompt " << i << "; error " << r.error);
    REQUIRE(r.done);
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.text == expected[i]);
  }
  REQUIRE(s.engine_status()["preemptions"].get<int>() > 0);
}

TEST_CASE("openai: bad input gets a 4xx naming what was wrong, and the server keeps serving", "[openai]") {
  LiveServer s(stories_manifest());
  struct Case {
    std::string name, body;
    int status;
    std::string param, message_part;
  };
  std::string long_prompt;
  for (int i = 0; i < 1000; ++i) long_prompt += "Once upon a time ";
  const std::vector<Case> cases = {
      {"malformed JSON", R"({"prompt": "hi", )", 400, "", "JSON"},
      {"not an object", R"([1, 2])", 400, "", "object"},
      {"max_tokens of the wrong type", R"({"prompt": "hi", "max_tokens": "ten"})", 400, "max_tokens", "integer"},
      {"negative max_tokens", R"({"prompt": "hi", "max_tokens": -5})", 400, "max_tokens", "-5"},
      {"huge max_tokens", R"({"prompt": "hi", "max_tokens": 1000000000})", 400, "max_tokens", "context"},
      {"temperature out of range", R"({"prompt": "hi", "temperature": 7})", 400, "temperature", "7"},
      {"prompt of the wrong type", R"({"prompt": 12})", 400, "prompt", "string"},
      {"missing prompt", R"({"max_tokens": 4})", 400, "prompt", "prompt"},
      {"prompt longer than the context", json{{"prompt", long_prompt}}.dump(), 400, "prompt", "context"},
      {"token outside the vocabulary", R"({"prompt": [1, 99999]})", 400, "prompt", "vocabulary"},
      {"unknown model", R"({"prompt": "hi", "model": "gpt-17"})", 404, "model", "gpt-17"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    auto a = post(s, "/v1/completions", c.body);
    INFO(a.body.dump());
    REQUIRE(a.status == c.status);
    REQUIRE(a.body["error"]["type"] == "invalid_request_error");
    if (!c.param.empty()) REQUIRE(a.body["error"]["param"] == c.param);
    REQUIRE_THAT(a.body["error"]["message"].get<std::string>(), Catch::Matchers::Contains(c.message_part, Catch::CaseSensitive::No));
    REQUIRE(post(s, "/v1/completions", greedy("Once", 2).dump()).status == 200);
  }
  SECTION("a 100 MB body") {
    auto r = s.client().request("POST", "/v1/completions", std::string(100u << 20, 'x'), "application/json");
    // The server refuses before reading it all: the answer is a 413, or the connection closes.
    if (r.ok()) {
      REQUIRE(r.status == 413);
      REQUIRE_THAT(r.body, Catch::Matchers::Contains("larger than the limit"));
    }
    REQUIRE(post(s, "/v1/completions", greedy("Once", 2).dump()).status == 200);
  }
}

TEST_CASE("openai: the gateway holds 1000 concurrent streaming connections", "[openai][load][measured]") {
  // 16 sequences per step: the engine works through the thousand while every client stays connected.
  LiveServer s(stories_manifest("scheduler.continuous", 512, 16, 1100));
  constexpr size_t kClients = 1000;
  std::atomic<size_t> peak{0};
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling) {
      peak = std::max(peak.load(), s.server->gateway().in_flight());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::future<Streamed>> streams;
  for (size_t i = 0; i < kClients; ++i) {
    streams.push_back(std::async(std::launch::async, [&s, i] {
      return stream(s, "/v1/completions", json{{"prompt", "Once upon a time " + std::to_string(i)}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}});
    }));
  }
  size_t ok = 0;
  for (auto& f : streams) {
    Streamed r = f.get();
    if (r.status == 200 && r.done && r.finish_reason == "length" && r.error.empty()) ++ok;
  }
  sampling = false;
  sampler.join();
  REQUIRE(ok == kClients);
  INFO("most requests in flight at once: " << peak.load());
  REQUIRE(peak.load() >= kClients * 9 / 10);
}

TEST_CASE("openai: under speculative decoding stop strings and streams and logprobs and tokenhost.speculate answer as plain decoding",
          "[openai][spec_decode]") {
  LiveServer plain(stories_manifest());
  LiveServer spec(stories_manifest() + "draft_policy = \"fixed\"\nspec_decode = { plugin = \"spec_decode.ngram\" }\n");
  for (const std::string& prompt : story_prompts(6)) {
    INFO(prompt);
    const std::string full = alone_text(plain, prompt, 120);
    REQUIRE(alone_text(spec, prompt, 120) == full);
    // A stop string inside the text: the answer ends before it, and tokens past it (a draft run may
    // have carried the sequence beyond) never show.
    const size_t cut = full.find(' ', full.size() / 2);
    if (cut != std::string::npos && cut + 4 <= full.size()) {
      const std::string stop = full.substr(cut, 4);
      json body = greedy(prompt, 120);
      body["stop"] = {stop};
      auto a = post(spec, "/v1/completions", body.dump());
      REQUIRE(a.status == 200);
      CHECK(a.body["choices"][0]["text"] == full.substr(0, full.find(stop)));
      CHECK(a.body["choices"][0]["finish_reason"] == "stop");
    }
    // Streamed with log-probabilities, and with speculation off or bounded per request: the same.
    json with_logprobs = greedy(prompt, 60);
    with_logprobs["logprobs"] = 2;
    auto want = post(plain, "/v1/completions", with_logprobs.dump());
    auto got = post(spec, "/v1/completions", with_logprobs.dump());
    REQUIRE(got.status == 200);
    CHECK(got.body["choices"][0]["text"] == want.body["choices"][0]["text"]);
    CHECK(got.body["choices"][0]["logprobs"]["tokens"] == want.body["choices"][0]["logprobs"]["tokens"]);
    Streamed streamed = stream(spec, "/v1/completions", greedy(prompt, 60));
    CHECK(streamed.text == want.body["choices"][0]["text"]);
    for (const json& control : {json{{"speculate", false}}, json{{"max_draft", 2}}}) {
      json body = greedy(prompt, 60);
      body["tokenhost"] = control;
      auto a = post(spec, "/v1/completions", body.dump());
      REQUIRE(a.status == 200);
      CHECK(a.body["choices"][0]["text"] == want.body["choices"][0]["text"]);
    }
  }
  auto bad = post(spec, "/v1/completions", json{{"prompt", "Once"}, {"tokenhost", {{"max_draft", 99}}}}.dump());
  REQUIRE(bad.status == 400);
  CHECK(bad.body["error"]["param"] == "tokenhost.max_draft");
  const json e = wait_until_idle(spec);
  CHECK(e["speculation"]["drafts"].get<uint64_t>() > 0);
  CHECK(e["kv_accounting"]["disagreements"] == 0);
  CHECK(e["kv"]["free_blocks"] == e["kv"]["total_blocks"]);
}

}  // namespace server_openai_tests
