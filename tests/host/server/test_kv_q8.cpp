// 8-bit KV (kv_dtype = "q8_0", ABI 1.6) in the engine on stories260K: greedy text against the f16
// cache's over 200 tokens (the agreement is printed), both attention plugins alike, draft trees whose
// accepted keys move with their scales, prefix reuse, and plugins built before 1.6 refused.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "harness.hpp"
#include "models.hpp"
#include "test_server.hpp"

namespace server_kv_q8_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

std::string stories(const std::string& kv_dtype, const std::string& attention = "attention.cpu_flash",
                    const std::string& kvcache = "kvcache.paged", const std::string& extra = "") {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugin_paths = [")" + fixture_dir() + R"(/spec_tree", ")" + fixture_dir() + R"(/abi_1_5/kvcache"]

[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = 512

[engines.main]
model = "stories"
max_step_tokens = 256
max_draft = 6
draft_policy = "fixed"
kv_dtype = ")" + kv_dtype + R"("
attention = { plugin = ")" + attention + R"(" }
kvcache = { plugin = ")" + kvcache + R"(", config = { block_size = 16, n_blocks = 256 } }
scheduler = { plugin = "scheduler.continuous" }
)" + extra;
}

const std::vector<std::string> kPrompts = {"Once upon a time", "Lily and Tom went to the park.", "The big dog", "One day, a little bird",
                                           "Tim had a red ball. He"};

std::vector<std::vector<int32_t>> greedy_all(Server& server, uint32_t n) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : kPrompts) {
    GenerateRequest r = request_for(server, p, n);
    r.ignore_eos = true;
    const GenerateResult g = server.gateway().generate(r);
    INFO(p << ": " << g.error);
    REQUIRE(g.finish_reason == "length");
    out.push_back(g.tokens);
  }
  return out;
}

}  // namespace

TEST_CASE("q8_0 KV: stories260K's greedy text against the f16 cache's over 200 tokens, the agreement printed", "[server][q8_0]") {
  Server f16(read_deployment("f16.toml", stories("f16")));
  Server q8(read_deployment("q8.toml", stories("q8_0")));
  Server q8_reference(read_deployment("q8ref.toml", stories("q8_0", "attention.reference")));
  const auto want = greedy_all(f16, 200), got = greedy_all(q8, 200);
  // Both attention plugins read the same quantized cache: the same text.
  CHECK(greedy_all(q8_reference, 200) == got);
  size_t same = 0, prefix = 0, total = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    size_t k = 0;
    while (k < want[i].size() && want[i][k] == got[i][k]) ++k;
    prefix += k;
    INFO("prompt " << i << ": the first " << k << " tokens equal f16's");
    CHECK(k >= 8);  // every text starts as with f16
    for (size_t t = 0; t < want[i].size(); ++t) same += want[i][t] == got[i][t];
    total += want[i].size();
  }
  const double agreement = double(prefix) / double(total);
  std::printf("q8_0 KV against f16 on stories260K, %zu prompts x 200 greedy tokens: %.1f%% of tokens before the first "
              "difference, %.1f%% equal position by position\n", want.size(), 100 * agreement, 100.0 * double(same) / double(total));
  // Heads of 8 in groups of 8 (a step of max |x| / 127 against f16's 2^-11 relative): the tiny model's
  // greedy texts part from f16's after 10 to 50 tokens (f32 and f16 agree through 153 to 200).
  CHECK(agreement > 0.05);
}

TEST_CASE("q8_0 KV: draft trees, prefix reuse and both attention plugins give plain decoding's tokens", "[server][q8_0]") {
  Server plain(read_deployment("plain.toml", stories("q8_0")));
  const auto want = greedy_all(plain, 80);
  SECTION("draft trees: the accepted branch's keys and values move with their scales") {
    Server spec(read_deployment("spec.toml", stories("q8_0", "attention.cpu_flash", "kvcache.paged", "spec_decode = { plugin = \"spec_decode.tree\" }\n")));
    CHECK(greedy_all(spec, 80) == want);
    CHECK(spec.status()["engines"][0]["speculation"]["accepted_tokens"].get<uint64_t>() > 0);
  }
  SECTION("prefix reuse") {
    Server prefix(read_deployment("prefix.toml", stories("q8_0", "attention.cpu_flash", "kvcache.prefix")));
    for (int pass = 0; pass < 2; ++pass) CHECK(greedy_all(prefix, 80) == want);
    // The second pass finds every prompt longer than one block of 16 tokens (one byte a token).
    uint64_t longer = 0;
    for (const auto& p : kPrompts) longer += p.size() > 16;
    CHECK(prefix.status()["engines"][0]["prefix_cache"]["hits"].get<uint64_t>() == longer);
  }
}

TEST_CASE("q8_0 KV: a kvcache plugin built before ABI 1.6 is refused for a q8_0 engine", "[server][q8_0]") {
  try {
    Server server(read_deployment("old.toml", stories("q8_0", "attention.cpu_flash", "kvcache.abi_1_5")));
    FAIL("a q8_0 engine started with a kvcache plugin built against ABI 1.5");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Contains("built against ABI 1.5; a q8_0 KV cache needs kvcache and attention plugins built against 1.6"));
  }
  // The manifest names what it takes.
  CHECK_THROWS_WITH(read_deployment("bad.toml", stories("q4_0")), Contains("is not one of f32, f16, q8_0"));
}

}  // namespace server_kv_q8_tests
