// Prefix caching in the engine (kvcache.prefix): requests that share a prompt prefix reuse its KV and
// give exactly the tokens of an engine without it (stories260K and a synthetic model, both attention
// plugins, f16 and f32 KV), at block boundaries and inside blocks, 64 at once, under eviction, with
// speculative decoding on; prompts arriving together wait for the first to compute their shared prefix;
// a prompt arriving during a step joins the next one, its lookup notwithstanding; reuse stays within one
// API key and cache_salt; the admin flush; a swap
// between kvcache.paged and kvcache.prefix under load loses nothing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <string>
#include <vector>

#include "harness.hpp"
#include "models.hpp"
#include "test_server.hpp"

namespace server_prefix_cache_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

// attention: a plugin id, or a whole inline table ("{ plugin = ..., config = ... }"); server_extra: lines
// of the [server] table.
std::string stories_manifest(const std::string& kvcache, const std::string& attention = "attention.cpu_flash",
                             const std::string& kv_dtype = "f16", uint32_t n_blocks = 256, const std::string& extra = "",
                             const std::string& server_extra = "") {
  const std::string attention_table = attention.rfind('{', 0) == 0 ? attention : "{ plugin = \"" + attention + "\" }";
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
)" + server_extra + R"(
[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = 512

[engines.main]
model = "stories"
max_step_tokens = 128
kv_dtype = ")" + kv_dtype + R"("
attention = )" + attention_table + R"(
kvcache = { plugin = ")" + kvcache + R"(", config = { block_size = 16, n_blocks = )" + std::to_string(n_blocks) + R"( } }
scheduler = { plugin = "scheduler.continuous", config = { max_prefill_chunk = 32 } }
)" + extra;
}

// A system prompt, then one of several questions: prompts sharing 5 full blocks and some of a sixth.
const std::string kStem =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog, "
    "who was big and brown. ";
std::vector<std::string> shared_prompts() {
  return {kStem + "One day", kStem + "Lily saw a bird.", kStem + "The dog ran to the park and", kStem,
          kStem + "They were happy."};
}

GenerateResult greedy(Server& server, const std::string& prompt, uint32_t max_tokens, const std::string& salt = "",
                      const std::string& key = "") {
  GenerateRequest r = request_for(server, prompt, max_tokens);
  r.cache_salt = salt;
  r.api_key = key;
  return server.gateway().generate(r);
}

std::vector<GenerateResult> all_at_once(Server& server, const std::vector<std::string>& prompts, uint32_t max_tokens) {
  std::vector<std::future<GenerateResult>> f;
  for (const auto& p : prompts) f.push_back(std::async(std::launch::async, [&server, p, max_tokens] { return greedy(server, p, max_tokens); }));
  std::vector<GenerateResult> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

nlohmann::json engine_status(Server& server) { return server.status()["engines"][0]; }

}  // namespace

TEST_CASE("prefix cache: shared prompt prefixes are reused and give the tokens of an engine without it", "[server][prefix]") {
  for (const char* attention : {"attention.cpu_flash", "attention.reference"}) {
    for (const char* dtype : {"f16", "f32"}) {
      INFO(attention << ", kv " << dtype);
      Server plain(read_deployment("plain.toml", stories_manifest("kvcache.paged", attention, dtype)));
      Server prefix(read_deployment("prefix.toml", stories_manifest("kvcache.prefix", attention, dtype)));
      std::vector<std::vector<int32_t>> want;
      for (const auto& p : shared_prompts()) want.push_back(greedy(plain, p, 24).tokens);
      for (int pass = 0; pass < 2; ++pass) {  // the second pass finds every prompt cached
        for (size_t i = 0; i < want.size(); ++i) {
          const GenerateResult got = greedy(prefix, shared_prompts()[i], 24);
          INFO("pass " << pass << ", prompt " << i << ": " << got.error);
          REQUIRE(got.finish_reason == "length");
          CHECK(got.tokens == want[i]);
        }
      }
      const auto st = engine_status(prefix);
      CHECK(st["prefix_cache"]["enabled"] == true);
      CHECK(st["prefix_cache"]["lookups"] == 10);
      CHECK(st["prefix_cache"]["hits"] >= 9);  // all but the first
      // A prompt cached whole (kStem, 8 blocks' worth or less) recomputes its last block only.
      CHECK(st["prefix_cache"]["cached_tokens"].get<uint64_t>() >= 9 * 64);
      CHECK(st["kv_accounting"]["disagreements"] == 0);
      CHECK(st["kv"]["cached_blocks"].get<uint32_t>() > 0);
    }
  }
}

TEST_CASE("prefix cache: 64 concurrent requests on one prefix, and eviction under pressure while others read", "[server][prefix]") {
  // 48 blocks of 16: the 64 requests' distinct tails and outputs do not all fit beside the cached
  // prefixes, so cached blocks are taken back (and sequences preempted) while others still read them.
  Server plain(read_deployment("plain.toml", stories_manifest("kvcache.paged")));
  Server prefix(read_deployment("prefix.toml", stories_manifest("kvcache.prefix", "attention.cpu_flash", "f16", 48)));
  std::vector<std::string> prompts;
  for (int i = 0; i < 64; ++i) prompts.push_back(shared_prompts()[size_t(i) % 5] + (i % 3 == 0 ? "" : " and " + std::to_string(i)));
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(greedy(plain, p, 20).tokens);
  for (int round = 0; round < 2; ++round) {
    const auto got = all_at_once(prefix, prompts, 20);
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("round " << round << ", request " << i << ": " << got[i].error);
      REQUIRE(got[i].finish_reason == "length");
      CHECK(got[i].tokens == want[i]);
    }
  }
  const auto st = engine_status(prefix);
  // Round one's prompts all arrive before any is computed: they find nothing. Round two's find theirs,
  // but for what the pressure took back meanwhile, which depends on the timing (43 to 63 of 64 seen).
  CHECK(st["prefix_cache"]["hits"].get<uint64_t>() >= 16);
  CHECK(st["kv"]["evicted_blocks"].get<uint64_t>() > 0);
  CHECK(st["kv_accounting"]["disagreements"] == 0);
  CHECK(st["sequences"] == 0);
  CHECK(st["kv"]["free_blocks"].get<uint32_t>() + st["kv"]["cached_blocks"].get<uint32_t>() == 48);
}

TEST_CASE("prefix cache: requests that arrive together share the prefix the first of them computes", "[server][prefix]") {
  // Eight prompts at once, a step able to take several whole: the prompts after the first wait for it
  // to compute the shared blocks (or, arriving once it has, find them on arrival).
  std::string manifest = stories_manifest("kvcache.prefix");
  const std::string chunked = "max_step_tokens = 128";
  manifest.replace(manifest.find(chunked), chunked.size(), "max_step_tokens = 512");
  const std::string small = "max_prefill_chunk = 32";
  manifest.replace(manifest.find(small), small.size(), "max_prefill_chunk = 512");
  Server plain(read_deployment("plain.toml", stories_manifest("kvcache.paged")));
  Server prefix(read_deployment("prefix.toml", manifest));
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(kStem + "Number " + std::to_string(i) + " said");
  // Started from one thread, back to back (as the gateway starts a batch prompt's sequences): the
  // engine asks for every lookup before its first step.
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (const auto& p : prompts) streams.push_back(prefix.gateway().start(request_for(prefix, p, 12)));
  std::vector<GenerateResult> got;
  for (auto& stream : streams) {
    std::optional<GenerateResult> end;
    for (size_t seen = 0; !end;) {
      auto update = stream->wait(seen, std::chrono::seconds(60));
      seen += update.tokens.size();
      end = update.result;
    }
    got.push_back(*end);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i << ": " << got[i].error);
    REQUIRE(got[i].finish_reason == "length");
    CHECK(got[i].tokens == greedy(plain, prompts[i], 12).tokens);
  }
  const auto st = engine_status(prefix);
  INFO(st["prefix_cache"].dump());
  CHECK(st["prefix_cache"]["hits"].get<uint64_t>() >= 4);
  CHECK(st["prefix_cache"]["cached_tokens"].get<uint64_t>() >= 4 * 112);  // 7 of kStem's blocks of 16 each
  CHECK(st["kv_accounting"]["disagreements"] == 0);
}

TEST_CASE("prefix cache: prompts arriving behind a shared prefix wait for the first to compute it, then adopt it", "[server][prefix]") {
  // Chunks of 32 tokens, 128 a step: without waiting, four prompts would start computing kStem's blocks
  // in the first step and the others find at most one chunk's worth when they look again. Waiting,
  // every prompt after the first adopts all 7 of kStem's whole blocks. The first is cancelled in one
  // round: those waiting for it go on without it and still give the tokens of an engine without the cache.
  Server plain(read_deployment("plain.toml", stories_manifest("kvcache.paged")));
  for (bool cancel_leader : {false, true}) {
    INFO((cancel_leader ? "the first cancelled" : "all run"));
    Server prefix(read_deployment("prefix.toml", stories_manifest("kvcache.prefix")));
    std::vector<std::string> prompts;
    for (int i = 0; i < 8; ++i) prompts.push_back(kStem + "Number " + std::to_string(i) + " said");
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (const auto& p : prompts) streams.push_back(prefix.gateway().start(request_for(prefix, p, 12)));
    if (cancel_leader) streams[0]->cancel();
    for (size_t i = 0; i < streams.size(); ++i) {
      std::optional<GenerateResult> end;
      for (size_t seen = 0; !end;) {
        auto update = streams[i]->wait(seen, std::chrono::seconds(60));
        seen += update.tokens.size();
        end = update.result;
      }
      INFO("request " << i << ": " << end->error);
      if (i == 0 && cancel_leader) continue;  // cancelled, or done before the cancel reached it
      REQUIRE(end->finish_reason == "length");
      CHECK(end->tokens == greedy(plain, prompts[i], 12).tokens);
    }
    const auto st = engine_status(prefix);
    INFO(st["prefix_cache"].dump());
    CHECK(st["prefix_cache"]["waits"].get<uint64_t>() >= 1);
    if (!cancel_leader) {
      CHECK(st["prefix_cache"]["hits"].get<uint64_t>() >= 7);
      CHECK(st["prefix_cache"]["cached_tokens"].get<uint64_t>() >= 7 * 112);  // kStem's 7 blocks, each
    }
    CHECK(st["kv_accounting"]["disagreements"] == 0);
    CHECK(st["sequences"] == 0);
  }
}

TEST_CASE("prefix cache: with speculative decoding on, reuse gives the tokens of both off", "[server][prefix]") {
  Server plain(read_deployment("plain.toml", stories_manifest("kvcache.paged")));
  Server both(read_deployment("both.toml", stories_manifest("kvcache.prefix", "attention.cpu_flash", "f16", 256,
                                                            "spec_decode = { plugin = \"spec_decode.ngram\" }\ndraft_policy = \"fixed\"\n")));
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = all_at_once(both, shared_prompts(), 40);
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("pass " << pass << ", prompt " << i << ": " << got[i].error);
      CHECK(got[i].tokens == greedy(plain, shared_prompts()[i], 40).tokens);
    }
  }
  const auto st = engine_status(both);
  CHECK(st["prefix_cache"]["hits"].get<uint64_t>() >= 5);
  CHECK(st["speculation"]["draft_tokens"].get<uint64_t>() > 0);
  CHECK(st["kv_accounting"]["disagreements"] == 0);
}

TEST_CASE("prefix cache: a conversation's next turn reuses the previous turn's prompt and answer", "[server][prefix]") {
  Server plain(read_deployment("plain.toml", stories_manifest("kvcache.paged")));
  Server prefix(read_deployment("prefix.toml", stories_manifest("kvcache.prefix")));
  GenerateRequest turn = request_for(prefix, kStem, 40);
  std::vector<int32_t> conversation = turn.prompt;
  uint64_t cached_before = 0;
  for (int t = 0; t < 3; ++t) {
    INFO("turn " << t << ", " << conversation.size() << " tokens of conversation");
    GenerateRequest r = request_for(prefix, "", 40);
    r.prompt = conversation;
    GenerateRequest same = r;
    same.id = plain.gateway().next_sequence_id();
    const GenerateResult got = prefix.gateway().generate(r);
    REQUIRE(got.finish_reason == "length");
    CHECK(got.tokens == plain.gateway().generate(same).tokens);
    const uint64_t cached = engine_status(prefix)["prefix_cache"]["cached_tokens"].get<uint64_t>();
    // Every whole block of the last turn's prompt and answer is found: of the answer's 40 tokens the
    // last never went through a step (it was sampled, not fed), and 8 tokens of user text follow it.
    if (t > 0) CHECK(cached - cached_before == (conversation.size() - 8 - 1) / 16 * 16);
    cached_before = cached;
    conversation.insert(conversation.end(), got.tokens.begin(), got.tokens.end());
    for (unsigned char c : std::string(" Then, ")) conversation.push_back(c);  // the user's next message
    conversation.resize(conversation.size() + 1, 'x');
  }
}

TEST_CASE("prefix cache: the scheduler is shown each sequence's cached prompt positions", "[server][prefix]") {
  // The fixture scheduler (tests/fixtures) exports the largest th_sched_state.seq_cached it was shown.
  std::string manifest = stories_manifest("kvcache.prefix");
  const std::string continuous = "{ plugin = \"scheduler.continuous\", config = { max_prefill_chunk = 32 } }";
  manifest.replace(manifest.find(continuous), continuous.size(), "{ plugin = \"scheduler.fixture\" }");
  manifest.replace(manifest.find("log_level"), 0, "plugin_paths = [\"" + fixture_dir() + "/good\"]\n");
  Server server(read_deployment("fixture.toml", manifest));
  auto shown = [&] { return metric_sum(server, "tokenhost_plugin_fixture_seq_cached_max", "scheduler.fixture"); };
  greedy(server, shared_prompts()[0], 4);
  CHECK(shown() <= 0);  // nothing was cached
  greedy(server, shared_prompts()[1], 4);
  const auto cached = engine_status(server)["prefix_cache"]["cached_tokens"].get<double>();
  REQUIRE(cached > 0);
  CHECK(shown() == cached);
}

TEST_CASE("prefix cache: reuse stays within one API key and cache_salt", "[server][prefix]") {
  Server server(read_deployment("prefix.toml", stories_manifest("kvcache.prefix")));
  const std::string p = shared_prompts()[0];
  auto hits = [&] { return engine_status(server)["prefix_cache"]["hits"].get<uint64_t>(); };
  const auto first = greedy(server, p, 8, "", "key-a");
  CHECK(hits() == 0);
  CHECK(greedy(server, p, 8, "", "key-b").tokens == first.tokens);
  CHECK(hits() == 0);  // another key: nothing shared
  CHECK(greedy(server, p, 8, "tenant-1", "key-a").tokens == first.tokens);
  CHECK(hits() == 0);  // the same key with a salt: apart from the key alone
  greedy(server, p, 8, "tenant-1", "key-a");
  CHECK(hits() == 1);
  greedy(server, p, 8, "", "key-b");
  CHECK(hits() == 2);
}

TEST_CASE("prefix cache: the admin flush frees the cached blocks and an engine without a prefix cache refuses it", "[server][prefix]") {
  Server server(read_deployment("prefix.toml", stories_manifest("kvcache.prefix")));
  greedy(server, shared_prompts()[0], 8);
  REQUIRE(engine_status(server)["kv"]["cached_blocks"].get<uint32_t>() > 0);
  CHECK_THAT(server.flush_prefix_cache("main"), Contains("prefix cache flushed"));
  auto st = engine_status(server);
  CHECK(st["kv"]["cached_blocks"] == 0);
  CHECK(st["kv"]["free_blocks"] == 256);
  greedy(server, shared_prompts()[0], 8);
  CHECK(engine_status(server)["prefix_cache"]["hits"] == 0);  // nothing left to find
  try {
    server.flush_prefix_cache("nope");
    FAIL("flushed an unknown engine");
  } catch (const AdminError& e) {
    CHECK(e.http_status == 404);
  }
  Server paged(read_deployment("paged.toml", stories_manifest("kvcache.paged")));
  try {
    paged.flush_prefix_cache("main");
    FAIL("flushed an engine whose kvcache keeps no prefix cache");
  } catch (const AdminError& e) {
    CHECK(e.http_status == 409);
    CHECK_THAT(e.what(), Contains("kvcache.paged keeps no prefix cache"));
  }
}

TEST_CASE("prefix cache: a prompt arriving while a step computes is looked up and joins the very next step", "[server][prefix]") {
  // Steps made slow (attention.flaky sleeps 20 ms in each of stories260K's 5 layers while a file
  // exists): a stream A decodes one token a step. B, sharing kStem's cached blocks, is sent just after
  // one of A's tokens came, that is while the next step computes (the engine starts it as it hands the
  // token over), so its lookup waits in the worker behind that step. The lookup's answer comes right
  // after the step's result, and the step after is decided with B in it: B's first token comes with
  // A's second after B was sent, not its third.
  namespace fs = std::filesystem;
  const fs::path slow = fs::temp_directory_path() / ("tokenhost-prefix-slow-" + std::to_string(::getpid()));
  fs::remove(slow);
  const std::string manifest = stories_manifest(
      "kvcache.prefix", "{ plugin = \"attention.flaky\", config = { slow_while = \"" + slow.string() + "\", slow_ms = 20 } }",
      "f32", 256, "", "plugin_paths = [\"" + fixture_dir() + "/attention_flaky\"]\n");
  Server server(read_deployment("slow.toml", manifest));
  REQUIRE(greedy(server, kStem + "One day", 2).error.empty());  // kStem's blocks cached
  std::ofstream(slow.string()).put('x');
  auto a = server.gateway().start(request_for(server, "The bird sang a song.", 40));
  auto tokens_of = [](TokenStream& s, size_t seen, std::chrono::milliseconds wait) {
    for (auto u = s.wait(seen, wait); !u.tokens.empty(); u = s.wait(seen, std::chrono::milliseconds(0))) seen += u.tokens.size();
    return seen;
  };
  size_t a_seen = tokens_of(*a, 0, std::chrono::seconds(30));  // A decodes
  REQUIRE(a_seen >= 1);
  a_seen = tokens_of(*a, a_seen, std::chrono::seconds(30));  // just after a step's result: the next computes
  auto b = server.gateway().start(request_for(server, kStem + "They were happy.", 2));
  auto first = b->wait(0, std::chrono::seconds(30));
  REQUIRE(!first.tokens.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(40));  // A's token of that same step lands; the next is 100 ms off
  const size_t a_now = tokens_of(*a, a_seen, std::chrono::milliseconds(0));
  fs::remove(slow);
  INFO("A's tokens from B's send to B's first token: " << a_now - a_seen);
  CHECK(a_now - a_seen == 2);
  CHECK(engine_status(server)["prefix_cache"]["hits"].get<uint64_t>() >= 1);
  a->cancel();
}

}  // namespace server_prefix_cache_tests
