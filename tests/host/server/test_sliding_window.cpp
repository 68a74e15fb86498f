// Attention sinks with a sliding window (an engine's sliding_window and attention_sinks) on
// stories260K: conversations ten times the trained context run to their end in a KV pool smaller than
// one of them, each sequence holding at most its window's blocks and the accounting exact; the text
// equals the windowless engine's until the first slide; a prompt longer than the context goes through
// window by window, over HTTP too (the gateway bounds no windowed request by the context); a kvcache
// plugin built before ABI 1.6, a window past the context, one under two
// blocks and one the pool cannot hold are refused with what was wrong.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "models.hpp"
#include "openai_client.hpp"
#include "test_server.hpp"

namespace server_sliding_window_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kContext = 512, kBlock = 16;

// stories260K at its trained context; window 0: none.
std::string stories(uint32_t window, uint32_t n_blocks, const std::string& kvcache = "kvcache.paged", const std::string& kv_dtype = "f16",
                    const std::string& window_keys = "") {
  const std::string keys = window_keys.empty() && window > 0 ? "sliding_window = " + std::to_string(window) + "\nattention_sinks = 4\n" : window_keys;
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugin_paths = [")" + fixture_dir() + R"(/abi_1_5/kvcache"]

[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = )" + std::to_string(kContext) + R"(

[engines.main]
model = "stories"
max_step_tokens = 256
kv_dtype = ")" + kv_dtype + R"("
)" + keys + R"(attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = ")" + kvcache + R"(", config = { block_size = )" + std::to_string(kBlock) + R"(, n_blocks = )" +
         std::to_string(n_blocks) + R"( } }
scheduler = { plugin = "scheduler.continuous" }
)";
}

nlohmann::json engine_status(Server& server) { return server.status()["engines"][0]; }

GenerateRequest greedy(Server& server, std::vector<int32_t> prompt, uint32_t max_tokens) {
  GenerateRequest r = request_for(server, "x", max_tokens);
  r.prompt = std::move(prompt);
  r.ignore_eos = true;
  return r;
}

}  // namespace

TEST_CASE("sliding window: two conversations of ten contexts each complete in a pool smaller than one, memory bounded",
          "[server][window]") {
  const std::string kvcache = GENERATE(std::string("kvcache.paged"), std::string("kvcache.prefix"));
  const std::string kv_dtype = GENERATE(std::string("f16"), std::string("q8_0"));
  INFO(kvcache << ", " << kv_dtype << " KV");
  // Window 240 after 16 sink positions: 16 blocks a sequence at most; the pool holds 40 (640 positions).
  const uint32_t total_blocks = 40, per_sequence = (16 + 240) / kBlock;
  Server server(read_deployment("window.toml", stories(240, total_blocks, kvcache, kv_dtype)));
  std::atomic<bool> done{false};
  std::atomic<uint32_t> most_used{0};
  // The blocks sequences hold (cached ones not counted), as the engine's gauge follows them. The engine
  // registers its metrics when it first runs: a status answered says it has.
  REQUIRE(engine_status(server)["kv"]["total_blocks"] == total_blocks);
  const metrics::Family* held = server.metrics().find("tokenhost_kv_blocks_used");
  REQUIRE(held != nullptr);
  std::thread watch([&] {
    while (!done) {
      most_used = std::max(most_used.load(), uint32_t(held->value({"main"})));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  // Each turn sends the whole conversation so far and adds 300 tokens and the next question to it.
  std::vector<size_t> lengths(2), turns(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> conversations;
  for (size_t c = 0; c < 2; ++c)
    conversations.emplace_back([&, c] {
      std::vector<int32_t> history = request_for(server, c == 0 ? "Once upon a time" : "Tom had a big red ball.", 1).prompt;
      const std::vector<int32_t> question = request_for(server, " What happened next?", 1).prompt;
      while (history.size() < 10 * kContext && errors[c].empty()) {
        const GenerateResult r = server.gateway().generate(greedy(server, history, 300));
        if (r.finish_reason != "length" || r.tokens.size() != 300) errors[c] = r.finish_reason + ": " + r.error;
        history.insert(history.end(), r.tokens.begin(), r.tokens.end());
        history.insert(history.end(), question.begin() + 1, question.end());  // without its BOS
        ++turns[c];
      }
      lengths[c] = history.size();
    });
  for (auto& t : conversations) t.join();
  done = true;
  watch.join();
  for (size_t c = 0; c < 2; ++c) {
    INFO("conversation " << c << " after " << turns[c] << " turns");
    CHECK(errors[c].empty());
    CHECK(lengths[c] >= 10 * kContext);
  }
  // Every sequence held at most its window's blocks (a prefix cache keeps more, held by none).
  INFO("most blocks held at once: " << most_used.load());
  CHECK(most_used.load() > per_sequence);
  CHECK(most_used.load() <= 2 * per_sequence);
  const auto status = engine_status(server);
  CHECK(status["sliding_window"]["released_positions"].get<uint64_t>() > 2 * 9 * kContext);
  CHECK(status["kv_accounting"]["disagreements"].get<uint64_t>() == 0);
  CHECK(status["kv"]["free_blocks"].get<uint32_t>() + status["kv"].value("cached_blocks", 0u) == total_blocks);
  // The conversation's last prompt is refused by the same engine without a window.
  Server plain(read_deployment("plain.toml", stories(0, total_blocks, kvcache, kv_dtype)));
  std::vector<int32_t> long_prompt(2 * kContext, 5);
  const GenerateResult refused = plain.gateway().generate(greedy(plain, long_prompt, 10));
  CHECK(refused.finish_reason == "error");
  CHECK_THAT(refused.error, Contains("holds at most 511 before generating"));
}

TEST_CASE("sliding window: the text is the windowless engine's until the first slide, then goes on past the context",
          "[server][window]") {
  Server plain(read_deployment("plain.toml", stories(0, 64)));
  Server window(read_deployment("window.toml", stories(240, 64)));
  // 16 + 240 positions, released 48 at a time once past 208: prompt and output below that never slide.
  for (const std::string& prompt : {std::string("Once upon a time"), std::string("Lily and Tom went to the park."), std::string("The big dog")}) {
    const GenerateResult a = plain.gateway().generate(greedy(plain, request_for(plain, prompt, 1).prompt, 180));
    const GenerateResult b = window.gateway().generate(greedy(window, request_for(window, prompt, 1).prompt, 180));
    INFO(prompt);
    REQUIRE(a.finish_reason == "length");
    CHECK(b.tokens == a.tokens);
  }
  CHECK(engine_status(window)["sliding_window"]["slides"].get<uint64_t>() == 0);
  // Past the window, and past the context the windowless engine stops at.
  const GenerateResult stopped = plain.gateway().generate(greedy(plain, request_for(plain, "Once upon a time", 1).prompt, 1000));
  CHECK(stopped.tokens.size() < kContext);
  const GenerateResult on = window.gateway().generate(greedy(window, request_for(window, "Once upon a time", 1).prompt, 1000));
  CHECK(on.finish_reason == "length");
  CHECK(on.tokens.size() == 1000);
  // The slide happens after 208 positions: the text agrees with the windowless one up to there.
  CHECK(std::equal(on.tokens.begin(), on.tokens.begin() + 180, stopped.tokens.begin()));
  CHECK(engine_status(window)["sliding_window"]["slides"].get<uint64_t>() > 0);
}

TEST_CASE("sliding window: a prompt three contexts long goes through window by window", "[server][window]") {
  Server window(read_deployment("window.toml", stories(240, 32)));
  std::vector<int32_t> prompt = request_for(window, "Once upon a time", 1).prompt;
  const std::vector<int32_t> sentence = request_for(window, " there was a girl named Lily who liked to play in the park.", 1).prompt;
  while (prompt.size() < 3 * kContext) prompt.insert(prompt.end(), sentence.begin() + 1, sentence.end());
  const GenerateResult r = window.gateway().generate(greedy(window, prompt, 20));
  INFO(r.error);
  CHECK(r.finish_reason == "length");
  CHECK(r.tokens.size() == 20);
  CHECK(engine_status(window)["kv_accounting"]["disagreements"].get<uint64_t>() == 0);
}

TEST_CASE("sliding window: the gateway takes a prompt past the context for a windowed model only", "[server][window]") {
  std::string prompt = "Once upon a time";
  while (prompt.size() < 4 * kContext) prompt += " there was a girl named Lily who liked to play in the park.";
  {
    LiveServer window(stories(240, 32));
    const Answer a = post(window, "/v1/completions", nlohmann::json{{"prompt", prompt}, {"max_tokens", 700}, {"temperature", 0}}.dump());
    INFO(a.body.dump());
    REQUIRE(a.status == 200);
    CHECK(a.body["usage"]["prompt_tokens"].get<int>() > int(kContext));
    CHECK(a.body["usage"]["completion_tokens"].get<int>() <= 700);
    // Without max_tokens: at most a context's worth.
    const Answer b = post(window, "/v1/completions", nlohmann::json{{"prompt", prompt}, {"temperature", 0}}.dump());
    REQUIRE(b.status == 200);
    CHECK(b.body["usage"]["completion_tokens"].get<int>() <= int(kContext));
  }
  LiveServer plain(stories(0, 32));
  const Answer refused = post(plain, "/v1/completions", nlohmann::json{{"prompt", prompt}, {"max_tokens", 10}}.dump());
  CHECK(refused.status == 400);
  CHECK(refused.body["error"]["code"] == "context_length_exceeded");
}

TEST_CASE("sliding window: refused with what was wrong", "[server][window]") {
  // A kvcache plugin built against 1.5 has no seq_drop_blocks.
  try {
    Server server(read_deployment("old.toml", stories(240, 64, "kvcache.abi_1_5")));
    FAIL("an engine with a sliding window started on a kvcache plugin built against ABI 1.5");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Contains("sliding_window needs a kvcache plugin with seq_drop_blocks (ABI 1.6)"));
  }
  // The engine's blocks: under two, or more than its pool holds.
  CHECK_THROWS_WITH(Server(read_deployment("small.toml", stories(24, 64))), Contains("is under two KV blocks of 16 positions"));
  CHECK_THROWS_WITH(Server(read_deployment("pool.toml", stories(240, 8))), Contains("more than the 8 KV blocks of 16 positions hold"));
  // The manifest: past the context, sinks without a window.
  CHECK_THROWS_WITH(read_deployment("ctx.toml", stories(510, 64)), Contains("pass the context of model 'stories' (512 positions)"));
  CHECK_THROWS_WITH(read_deployment("sinks.toml", stories(0, 64, "kvcache.paged", "f16", "attention_sinks = 4\n")),
                    Contains("attention_sinks in [engines.main] keeps positions of a sliding window: set sliding_window too"));
}

}  // namespace server_sliding_window_tests
