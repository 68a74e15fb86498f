// Prompt log-probabilities through the engine (GenerateRequest::prompt_logprobs, OpenAI's echo with
// logprobs): every prompt token's log-probability given the ones before, against a float64 forward
// pass, for prompts that cross prefill chunks, run together with others, and share a prefix another
// request left in the prefix cache (which a scored prompt must not reuse); max_tokens 0 scores the
// prompt and generates nothing. The HTTP side and the sum against `tokenhost perplexity` are in
// tests/cli/perplexity.sh.
#include <catch2/catch.hpp>

#include <cmath>
#include <future>

#include "models.hpp"
#include "reference_forward.hpp"
#include "runtime/gguf_model.hpp"
#include "test_server.hpp"

namespace server_prompt_logprobs_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

std::string manifest() {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"

[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = 512

[engines.main]
model = "stories"
max_step_tokens = 64
kv_dtype = "f32"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 8, n_blocks = 256 } }
scheduler = { plugin = "scheduler.continuous", config = { max_prefill_chunk = 16 } }
)";
}

// log softmax of the reference's logits after prefix, at token.
double reference_logprob(const ModelWeights& w, const std::vector<int32_t>& prefix, int32_t token, int32_t& best) {
  const Vec logits = reference_forward(w, prefix).logits;
  const double top = *std::max_element(logits.begin(), logits.end());
  best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  double sum = 0;
  for (double v : logits) sum += std::exp(v - top);
  return logits[size_t(token)] - top - std::log(sum);
}

}  // namespace

TEST_CASE("prompt logprobs: every prompt token scored against a float64 forward, with no cached prefix reused",
          "[server][logprobs][prompt_logprobs]") {
  Server server(read_deployment("prompt.toml", manifest()));
  const auto weights = load_gguf_model(require_model_file("stories260K.gguf"), "stories260K").weights;
  auto rng = fresh_rng("prompt logprobs");
  auto random_tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(3 + rng() % 509);
    return t;
  };
  // A prefix another request leaves in the cache first (whole blocks of 8).
  std::vector<int32_t> shared = random_tokens(24);
  shared.insert(shared.begin(), 1);
  {
    GenerateRequest warm;
    warm.id = server.gateway().next_sequence_id();
    warm.prompt = shared;
    warm.prompt.push_back(7);
    warm.max_tokens = 2;
    REQUIRE(server.gateway().generate(warm).finish_reason == "length");
  }
  const auto lookups_before = server.status()["engines"][0]["prefix_cache"]["lookups"];

  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r;
    r.id = server.gateway().next_sequence_id();
    r.prompt = i % 2 == 0 ? shared : std::vector<int32_t>{1};
    const auto tail = random_tokens(1 + rng() % 40);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = uint32_t(i % 3 == 0 ? 0 : 1 + rng() % 4);
    r.prompt_logprobs = true;
    r.logprobs = true;
    r.sampling.top_logprobs = 3;
    requests.push_back(r);
  }
  std::vector<std::future<GenerateResult>> running;
  for (const auto& r : requests)
    running.push_back(std::async(std::launch::async, [&server, r] { return server.gateway().generate(r); }));
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    const GenerateResult got = running[i].get();
    INFO("request " << i << ": " << r.prompt.size() << " prompt tokens, max_tokens " << r.max_tokens << ": " << got.error);
    REQUIRE(got.finish_reason == "length");
    CHECK(got.tokens.size() == r.max_tokens);
    CHECK(got.logprobs.size() == r.max_tokens);
    REQUIRE(got.prompt_logprobs.size() == r.prompt.size() - 1);
    for (size_t k = 1; k < r.prompt.size(); ++k) {
      int32_t best = -1;
      const std::vector<int32_t> prefix(r.prompt.begin(), r.prompt.begin() + long(k));
      const double want = reference_logprob(*weights, prefix, r.prompt[k], best);
      const SampledToken& t = got.prompt_logprobs[k - 1];
      INFO("prompt token " << k);
      CHECK(t.token == r.prompt[k]);
      CHECK(std::abs(double(t.logprob) - want) < 1e-3);
      REQUIRE(t.top.size() == 3);
      CHECK(t.top[0].token == best);
    }
  }
  // Scored prompts looked nothing up: their rows are all computed.
  CHECK(server.status()["engines"][0]["prefix_cache"]["lookups"] == lookups_before);

  GenerateRequest nothing;
  nothing.id = server.gateway().next_sequence_id();
  nothing.prompt = shared;
  nothing.max_tokens = 0;
  const GenerateResult refused = server.gateway().generate(nothing);
  CHECK(refused.finish_reason == "error");
  CHECK_THAT(refused.error, Contains("max_tokens must be at least 1"));
}

}  // namespace server_prompt_logprobs_tests
