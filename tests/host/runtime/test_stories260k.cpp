// The real trained stories260K model (GGUF, f32): greedy generation from "Once upon a time" must
// reproduce, byte for byte, the text its author documented. Skipped (CTest says so) when the model
// files are not there ($TOKENHOST_MODELS, default the tree's models/, then ../shared/models beside the checkout).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <future>

#include "harness.hpp"
#include "models.hpp"
#include "manifest/deployment.hpp"
#include "server/server.hpp"
#include "model/quant.hpp"
#include "model/tokenizer.hpp"
#include "runtime/generator.hpp"
#include "runtime/gguf_model.hpp"

namespace runtime_stories260k_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("stories260K: greedy output from 'Once upon a time' is the documented text", "[model][stories260k]") {
  const std::string gguf = require_model_file("stories260K.gguf");
  const std::string expected_path = require_model_file("stories260K.once-upon-a-time.greedy256.txt");
  LoadedModel model = load_gguf_model(gguf, "stories260K");
  const auto& info = model.weights->spec.info;
  REQUIRE(info.dim == 64);
  REQUIRE(info.n_layers == 5);
  REQUIRE(info.n_heads == 8);
  REQUIRE(info.n_kv_heads == 4);
  REQUIRE(info.vocab_size == 512);
  Tokenizer tokenizer(model.tokenizer);

  // The KV cache in f32 and in f16 (the engines' default), read by the oracle and by the fast plugin.
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  const std::string attention = GENERATE(as<std::string>{}, "attention.reference", "attention.cpu_flash");
  INFO("kv dtype " << quant::dtype_name(kv_dtype) << ", " << attention);
  ModelSpec spec = model.weights->spec;
  spec.info.kv_dtype = kv_dtype;
  toml::table kv_config;
  kv_config.insert("block_size", 16);
  kv_config.insert("n_blocks", 64);
  Generator generator(model.weights, make_plugin(attention, spec), make_plugin("kvcache.paged", spec, kv_config));

  std::vector<int32_t> tokens = tokenizer.encode("Once upon a time", true);
  REQUIRE(tokens.front() == tokenizer.bos());
  // The documented run is 256 forward positions (0..255, BOS at 0): each predicts the next token, so
  // the text holds the prompt and every token predicted after it, up to position 256.
  const uint32_t positions = 256;
  std::vector<int32_t> all = tokens;
  auto stats = generator.generate(tokens, positions + 1 - uint32_t(tokens.size()), tokenizer.eos(), Generator::greedy,
                                  [&](int32_t t) {
                                    all.push_back(t);
                                    return true;
                                  });
  INFO("finish: " << stats.finish_reason << ", " << all.size() << " positions");
  std::string text = tokenizer.decode(all);
  std::string expected = read_file(expected_path);
  // The file may end with a newline the model did not write.
  while (!expected.empty() && expected.back() == '\n' && (text.empty() || text.back() != '\n')) expected.pop_back();
  REQUIRE(text == expected);
}

TEST_CASE("stories260K: served, concurrent requests in one batch give each the tokens it gives alone",
          "[model][stories260k][server]") {
  const std::string gguf = require_model_file("stories260K.gguf");
  const std::string manifest = R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[models.stories]
source = "gguf"
path = ")" + gguf + R"("
context_len = 512
[engines.main]
model = "stories"
max_step_tokens = 256
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 1024 } }
scheduler = { plugin = "scheduler.fifo", config = { max_prefill_chunk = 32 } }
)";
  Server server(read_deployment("stories.toml", manifest));
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben", "The sun was", "One day, a big dog",
                                            "Tom had a red ball", "She was sad because", "There was a cat", "Mom said"};
  auto ask = [&](const std::string& p) {
    GenerateRequest r;
    r.id = server.gateway().next_sequence_id();
    r.prompt = server.gateway().encode(p);
    r.max_tokens = 48;
    return server.gateway().generate(r);
  };
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    auto r = ask(p);
    REQUIRE(r.error.empty());
    alone.push_back(r.tokens);
  }
  // The served text starts the documented story.
  std::string expected = read_file(require_model_file("stories260K.once-upon-a-time.greedy256.txt"));
  std::string served = "Once upon a time" + server.gateway().decode(alone[0]);
  REQUIRE(expected.rfind(served, 0) == 0);

  std::vector<std::future<GenerateResult>> together;
  for (const auto& p : prompts) together.push_back(std::async(std::launch::async, [&, p] { return ask(p); }));
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO(prompts[i]);
    REQUIRE(together[i].get().tokens == alone[i]);
  }
}

TEST_CASE("deployment: a gguf model that is missing or broken is refused at its path", "[model][manifest]") {
  const std::string manifest = R"([models.m]
source = "gguf"
path = "/nonexistent/model.gguf"
)";
  REQUIRE_THROWS_WITH(read_deployment("m.toml", manifest),
                      Catch::Contains("m.toml:3:8: model file '/nonexistent/model.gguf' does not exist"));
  REQUIRE_THROWS_WITH(read_deployment("m.toml", "[models.m]\nsource = \"gguf\"\npath = \"x.gguf\"\ndim = 8\n"),
                      Catch::Contains("unknown key 'dim'"));
}

}  // namespace runtime_stories260k_tests
