// Cache-aware routing (router.prefix_affinity over engines with kvcache.prefix): a conversation's turns
// follow the engine that holds its history (round robin scatters them); the overlap counts only the
// request's API key and cache_salt; fresh prompts spread; a flush or a kvcache swap empties what the
// router counts on; each engine's summary stays within its pool as blocks are evicted.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "harness.hpp"
#include "models.hpp"
#include "test_server.hpp"

namespace server_prefix_routing_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// Two engines a and b on stories260K with prefix caches of n_blocks blocks of 16 tokens.
std::string two_engines(const std::string& router, uint32_t n_blocks = 256) {
  std::string m = R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"

[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = 512

[router]
plugin = ")" + router + R"("
)";
  for (const char* name : {"a", "b"})
    m += std::string("\n[engines.") + name + R"(]
model = "stories"
max_step_tokens = 128
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 16, n_blocks = )" + std::to_string(n_blocks) + R"( } }
scheduler = { plugin = "scheduler.continuous", config = { max_prefill_chunk = 64 } }
)";
  return m;
}

GenerateResult ask(Server& server, const std::vector<int32_t>& prompt, uint32_t max_tokens, const std::string& key = "") {
  GenerateRequest r = request_for(server, "", max_tokens);
  r.prompt = prompt;
  r.api_key = key;
  return server.gateway().generate(r);
}

std::vector<int32_t> text(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

nlohmann::json engine_status(Server& server, const std::string& name) {
  const nlohmann::json status = server.status();
  for (const auto& e : status["engines"])
    if (e["name"] == name) return e;
  FAIL("no engine " << name);
  return {};
}

uint64_t total(Server& server, const char* what) {
  return engine_status(server, "a")["prefix_cache"][what].get<uint64_t>() +
         engine_status(server, "b")["prefix_cache"][what].get<uint64_t>();
}

struct Conversations {
  uint64_t followups = 0, followups_moved = 0;  // turns after the first; those served elsewhere than the last
};

// Six conversations of four turns, one turn at a time: each turn's prompt is the conversation so far
// (the previous prompts, answers and a new user line).
Conversations converse(Server& server) {
  Conversations c;
  for (int session = 0; session < 6; ++session) {
    std::vector<int32_t> conversation = text("Conversation " + std::to_string(session) + ". Once upon a time, a little dog named Max");
    std::string last;
    for (int turn = 0; turn < 4; ++turn) {
      const GenerateResult r = ask(server, conversation, 24);
      INFO("session " << session << " turn " << turn << ": " << r.error);
      REQUIRE(r.finish_reason == "length");
      if (turn > 0) ++c.followups, c.followups_moved += r.engine != last;
      last = r.engine;
      conversation.insert(conversation.end(), r.tokens.begin(), r.tokens.end());
      const auto line = text(" Then " + std::to_string(turn) + ", ");
      conversation.insert(conversation.end(), line.begin(), line.end());
    }
  }
  return c;
}

}  // namespace

TEST_CASE("prefix routing: a conversation's turns follow the engine that holds its history", "[server][prefix][routing]") {
  Server affinity(read_deployment("affinity.toml", two_engines("router.prefix_affinity")));
  const Conversations c = converse(affinity);
  CHECK(c.followups == 18);
  CHECK(c.followups_moved == 0);
  CHECK(total(affinity, "hits") == 18);  // every follow-up found its conversation
  // Fresh conversations spread over the two idle engines.
  CHECK(engine_status(affinity, "a")["prefix_cache"]["lookups"].get<uint64_t>() == 12);
  CHECK(engine_status(affinity, "b")["prefix_cache"]["lookups"].get<uint64_t>() == 12);
  CHECK(engine_status(affinity, "a")["prefix_cache"]["summary_blocks"].get<uint64_t>() > 0);

  // The same conversations under round robin: turns alternate engines, and reuse reaches back two
  // turns at most.
  Server rr(read_deployment("rr.toml", two_engines("router.round_robin")));
  const Conversations scattered = converse(rr);
  CHECK(scattered.followups_moved == 18);
  CHECK(total(rr, "cached_tokens") < total(affinity, "cached_tokens"));
}

TEST_CASE("prefix routing: the overlap counts only the request's own namespace, and a flush empties it", "[server][prefix][routing]") {
  Server server(read_deployment("affinity.toml", two_engines("router.prefix_affinity")));
  const auto prompt = text("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.");
  const std::string first = ask(server, prompt, 8, "key-1").engine;
  const std::string other = first == "a" ? "b" : "a";
  // The rotation would go on to the other engine: the cached prompt keeps it where it is.
  CHECK(ask(server, prompt, 8, "key-1").engine == first);
  CHECK(ask(server, prompt, 8, "key-1").engine == first);
  // Another API key finds nothing of it anywhere: the rotation decides.
  CHECK(ask(server, prompt, 8, "key-2").engine == other);
  // Now both engines hold the prompt, each under one key.
  CHECK(ask(server, prompt, 8, "key-2").engine == other);
  CHECK(ask(server, prompt, 8, "key-1").engine == first);
  // A flush of `first` empties its summary: key-1's prompt is fresh again and goes by rotation (the
  // engine after `first`).
  REQUIRE(engine_status(server, first)["prefix_cache"]["summary_blocks"].get<uint64_t>() > 0);
  server.flush_prefix_cache(first);
  CHECK(engine_status(server, first)["prefix_cache"]["summary_blocks"] == 0);
  CHECK(ask(server, prompt, 8, "key-1").engine == other);
}

TEST_CASE("prefix routing: an engine's summary stays within its pool as blocks are evicted", "[server][prefix][routing]") {
  // 24 blocks per engine: twenty distinct prompts of 6-7 blocks each evict most of what came before.
  Server server(read_deployment("small.toml", two_engines("router.prefix_affinity", 24)));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 20; ++i)
    prompts.push_back(text(std::to_string(i) + " " + std::string(90, char('a' + i % 26)) + " the end"));
  for (const auto& p : prompts) REQUIRE(ask(server, p, 8).finish_reason == "length");
  for (const char* e : {"a", "b"}) {
    const auto st = engine_status(server, e);
    INFO("engine " << e << ": " << st.dump());
    CHECK(st["kv"]["evicted_blocks"].get<uint64_t>() > 0);
    CHECK(st["prefix_cache"]["summary_blocks"].get<uint64_t>() <= 24);
    // Nothing runs: the summary holds at most the blocks the pool keeps cached.
    CHECK(st["prefix_cache"]["summary_blocks"].get<uint64_t>() <= st["kv"]["cached_blocks"].get<uint64_t>());
  }
  // The last prompt is still cached where it ran: asked again, it stays there and hits.
  const uint64_t hits = total(server, "hits");
  ask(server, prompts.back(), 8);
  CHECK(total(server, "hits") == hits + 1);
}

}  // namespace server_prefix_routing_tests
