// Speculative decoding in the engine on stories260K: with a proposer in the spec_decode slot, every
// request's tokens are exactly those plain decoding gives (greedy, and sampled with every option and a
// seed), alone and concurrent, at any max_tokens; drafts are proposed and some accepted.
#include <catch2/catch.hpp>

#include <functional>

#include <cmath>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "eventually.hpp"
#include "files.hpp"
#include "harness.hpp"
#include "models.hpp"
#include "reference_forward.hpp"
#include "model/gguf_quantize.hpp"
#include "runtime/gguf_model.hpp"
#include "test_server.hpp"

namespace server_spec_decode_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

// policy "fixed" (verify every draft: most tests check verification, not the controller) or "adaptive".
std::string stories_manifest(const std::string& spec, uint32_t n_blocks = 512, const std::string& policy = "fixed") {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugin_paths = [")" + fixture_dir() + R"(/spec_garbage", ")" + fixture_dir() + R"(/spec_sampled", ")" + fixture_dir() + R"(/spec_tree", ")" + fixture_dir() + R"(/spec_slow", ")" + fixture_dir() + R"(/spec_throws"]

[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = 512

[engines.main]
model = "stories"
max_step_tokens = 256
draft_policy = ")" + policy + R"("
max_draft = 6
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = )" + std::to_string(n_blocks) + R"( } }
scheduler = { plugin = "scheduler.continuous" }
)" + spec;
}

std::vector<std::string> story_prompts() {
  return {"Once upon a time", "Lily and Tom went to the park.", "The big dog", "One day, a little bird"};
}

GenerateRequest story_request(Server& server, const std::string& prompt, uint32_t max_tokens, const SamplingParams& sampling) {
  GenerateRequest r = request_for(server, prompt, max_tokens);
  r.sampling = sampling;
  return r;
}

// Every prompt's tokens from `server`, one request at a time or all at once; each request may be
// changed first (its max_draft, say).
std::vector<GenerateResult> run_all(Server& server, uint32_t max_tokens, const SamplingParams& sampling, bool concurrent,
                                    const std::function<void(GenerateRequest&)>& change = {}) {
  std::vector<GenerateRequest> rs;
  for (const auto& p : story_prompts()) {
    rs.push_back(story_request(server, p, max_tokens, sampling));
    if (change) change(rs.back());
  }
  std::vector<GenerateResult> out;
  if (!concurrent) {
    for (auto& r : rs) out.push_back(server.gateway().generate(r));
    return out;
  }
  std::vector<std::future<GenerateResult>> f;
  for (auto& r : rs) f.push_back(std::async(std::launch::async, [&server, r] { return server.gateway().generate(r); }));
  for (auto& x : f) out.push_back(x.get());
  return out;
}

SamplingParams all_options() {
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.top_k = 40;
  sampled.top_p = 0.95f;
  sampled.min_p = 0.02f;
  sampled.repetition_penalty = 1.1f;
  sampled.frequency_penalty = 0.2f;
  sampled.presence_penalty = 0.1f;
  sampled.seed = 1234;
  sampled.logit_bias = {{13, -2.0f}};
  return sampled;
}

void require_same(const std::vector<GenerateResult>& got, const std::vector<GenerateResult>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("prompt " << i << ": " << got[i].finish_reason << " " << got[i].error);
    REQUIRE(got[i].error.empty());
    CHECK(got[i].finish_reason == want[i].finish_reason);
    CHECK(got[i].tokens == want[i].tokens);
  }
}



}  // namespace

TEST_CASE("spec decode: with ngram or suffix or tree drafts every request gives exactly plain decoding's tokens",
          "[server][spec_decode]") {
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  SamplingParams greedy, sampled = all_options();
  for (const char* plugin : {"spec_decode.ngram", "spec_decode.suffix", "spec_decode.tree"}) {
    INFO(plugin);
    auto spec = std::make_unique<Server>(
        read_deployment("spec.toml", stories_manifest(std::string("spec_decode = { plugin = \"") + plugin + "\" }\n")));
    for (const SamplingParams* sp : {&greedy, &sampled}) {
      for (uint32_t max_tokens : {1u, 7u, 160u}) {
        for (bool concurrent : {false, true}) {
          INFO((sp == &greedy ? "greedy" : "sampled") << ", max_tokens " << max_tokens << (concurrent ? ", concurrent" : ", alone"));
          const auto want = run_all(*plain, max_tokens, *sp, false);
          const auto got = run_all(*spec, max_tokens, *sp, concurrent);
          for (size_t i = 0; i < want.size(); ++i) {
            INFO("prompt " << i);
            REQUIRE(got[i].error.empty());
            CHECK(got[i].finish_reason == want[i].finish_reason);
            CHECK(got[i].tokens == want[i].tokens);
          }
        }
      }
    }
    const double drafted = metric_sum(*spec, "tokenhost_spec_draft_tokens_total", plugin);
    const double accepted = metric_sum(*spec, "tokenhost_spec_accepted_tokens_total", plugin);
    INFO("drafted " << drafted << ", accepted " << accepted);
    CHECK(drafted > 0);
    CHECK(accepted > 0);
    CHECK(accepted <= drafted);
  }
}

TEST_CASE("spec decode: log-probabilities stay those of plain decoding", "[server][spec_decode]") {
  SamplingParams greedy;
  greedy.top_logprobs = 3;
  const std::string spec = "spec_decode = { plugin = \"spec_decode.ngram\" }\n";
  for (uint32_t n_blocks : {512u}) {
    INFO(n_blocks << " KV blocks");
    auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("", n_blocks)));
    auto with = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest(spec, n_blocks)));
    auto run = [&](Server& server, bool concurrent) {
      std::vector<GenerateRequest> rs;
      for (const auto& p : story_prompts()) {
        rs.push_back(story_request(server, p, 120, greedy));
        rs.back().logprobs = true;
        rs.back().ignore_eos = true;
      }
      std::vector<GenerateResult> out;
      if (!concurrent) {
        for (auto& r : rs) out.push_back(server.gateway().generate(r));
        return out;
      }
      std::vector<std::future<GenerateResult>> f;
      for (auto& r : rs) f.push_back(std::async(std::launch::async, [&server, r] { return server.gateway().generate(r); }));
      for (auto& x : f) out.push_back(x.get());
      return out;
    };
    const auto want = run(*plain, false);
    const auto got = run(*with, true);
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("prompt " << i << ": " << got[i].finish_reason << " " << got[i].error);
      REQUIRE(got[i].error.empty());
      REQUIRE(got[i].tokens == want[i].tokens);
      REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
      for (size_t k = 0; k < want[i].logprobs.size(); ++k) {
        INFO("token " << k);
        CHECK(got[i].logprobs[k].token == want[i].logprobs[k].token);
        CHECK(got[i].logprobs[k].logprob == Approx(want[i].logprobs[k].logprob).margin(1e-4));
        REQUIRE(got[i].logprobs[k].top.size() == want[i].logprobs[k].top.size());
        for (size_t j = 0; j < want[i].logprobs[k].top.size(); ++j)
          CHECK(got[i].logprobs[k].top[j].token == want[i].logprobs[k].top[j].token);
      }
    }
    CHECK(metric_sum(*with, "tokenhost_spec_accepted_tokens_total", "spec_decode.ngram") > 0);
  }
}

TEST_CASE("spec decode: draft trees are verified along their second branch through both attention plugins",
          "[server][spec_decode]") {
  // spec_decode.tree's first child is never the lookup's token: what is accepted comes from the second
  // branch, whose keys and values the worker moves to the sequence's next positions after the step.
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  SamplingParams greedy;
  const auto want = run_all(*plain, 160, greedy, false, [](GenerateRequest& r) { r.ignore_eos = true; });
  for (const char* attention : {"attention.cpu_flash", "attention.reference"}) {
    INFO(attention);
    std::string manifest = stories_manifest("spec_decode = { plugin = \"spec_decode.tree\" }\n", 64);
    manifest.replace(manifest.find("attention.cpu_flash"), std::string("attention.cpu_flash").size(), attention);
    auto spec = std::make_unique<Server>(read_deployment("spec.toml", manifest));
    for (bool concurrent : {false, true}) {
      INFO((concurrent ? "concurrent" : "alone"));
      require_same(run_all(*spec, 160, greedy, concurrent, [](GenerateRequest& r) { r.ignore_eos = true; }), want);
    }
    const auto engine = spec->status()["engines"][0];
    INFO(engine["speculation"].dump() << " " << engine["kv_accounting"].dump());
    // Two or more tokens of one draft accepted: only the second branch has a child to accept.
    const double drafts = metric_sum(*spec, "tokenhost_spec_accepted_length_count", "spec_decode.tree");
    CHECK(drafts - metric_sum(*spec, "tokenhost_spec_accepted_length_bucket", "1", "le") > 0);
    CHECK(engine["kv_accounting"]["disagreements"] == 0);
    CHECK(eventually([&] { return spec->status()["engines"][0]["kv"]["free_blocks"] == 64; }));
  }
}

TEST_CASE("spec decode: under the adaptive controller requests get plain decoding's tokens and the status shows its model",
          "[server][spec_decode]") {
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  auto spec = std::make_unique<Server>(
      read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.ngram\" }\n", 512, "adaptive")));
  SamplingParams greedy;
  for (bool concurrent : {false, true}) {
    INFO((concurrent ? "concurrent" : "alone"));
    require_same(run_all(*spec, 160, greedy, concurrent), run_all(*plain, 160, greedy, false));
  }
  const auto speculation = spec->status()["engines"][0]["speculation"];
  INFO(speculation.dump());
  CHECK(speculation["max_draft"] == 6);
  CHECK(speculation["controller"]["policy"] == "adaptive");
  // It drafted while its prior said drafts pay, and measured what they cost.
  CHECK(speculation["drafts"].get<uint64_t>() > 0);
  CHECK(speculation["controller"]["cost_fitted"] == true);
  CHECK(speculation["controller"]["step_seconds_with_drafts"].get<double>() > 0);
  CHECK(speculation["controller"]["step_seconds_without_drafts"].get<double>() > 0);
  CHECK(speculation["controller"]["cost_per_row_s"].get<double>() > 0);
  CHECK(speculation["controller"]["step_seconds_by_rows"].contains("1"));  // one stream decoding alone
  CHECK(metric_sum(*spec, "tokenhost_spec_step_seconds", "with", "drafts") > 0);
  CHECK(metric_sum(*spec, "tokenhost_spec_step_seconds", "without", "drafts") > 0);
}

TEST_CASE("spec decode: rejected drafts give their KV blocks back and tight pools serve as without drafts",
          "[server][spec_decode]") {
  // Four 120-token requests at once in pools that hold one or two of them: the scheduler plans with
  // the cache's accounting, which stays exact only if every rejected draft position is rolled back.
  SamplingParams greedy;
  const std::string spec = "spec_decode = { plugin = \"spec_decode.ngram\" }\n";
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  const auto want = run_all(*plain, 120, greedy, false, [](GenerateRequest& r) { r.ignore_eos = true; });
  for (uint32_t n_blocks : {10u, 11u, 12u, 16u}) {
    INFO(n_blocks << " KV blocks of 16");
    auto with = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest(spec, n_blocks)));
    require_same(run_all(*with, 120, greedy, true, [](GenerateRequest& r) { r.ignore_eos = true; }), want);
    CHECK(with->status()["engines"][0]["speculation"]["accepted_tokens"].get<uint64_t>() > 0);
    // After every step the plugin's blocks in use were exactly those the sequences' kept positions need.
    INFO(with->status()["engines"][0]["kv_accounting"].dump());
    CHECK(with->status()["engines"][0]["kv_accounting"]["disagreements"] == 0);
    // Every block back once the last request is done (its free may still be on its way).
    CHECK(eventually([&] { return with->status()["engines"][0]["kv"]["free_blocks"] == n_blocks; }));
  }
}

TEST_CASE("spec decode: a request turns speculation off or bounds its draft length", "[server][spec_decode]") {
  SamplingParams greedy;
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.ngram\" }\n")));
  const auto want = run_all(*plain, 160, greedy, false);
  auto speculation = [&] { return spec->status()["engines"][0]["speculation"]; };
  // Off: no draft verified, the same tokens.
  require_same(run_all(*spec, 160, greedy, true, [](GenerateRequest& r) { r.max_draft = 0; }), want);
  CHECK(speculation()["drafts"] == 0);
  // At most one and at most two draft tokens per step.
  for (uint32_t bound : {1u, 2u}) {
    INFO("max_draft " << bound);
    const uint64_t drafts = speculation()["drafts"], tokens = speculation()["draft_tokens"];
    require_same(run_all(*spec, 160, greedy, true, [&](GenerateRequest& r) { r.max_draft = bound; }), want);
    const uint64_t new_drafts = speculation()["drafts"].get<uint64_t>() - drafts;
    const uint64_t new_tokens = speculation()["draft_tokens"].get<uint64_t>() - tokens;
    CHECK(new_drafts > 0);
    CHECK(new_tokens <= bound * new_drafts);
    if (bound == 2) CHECK(new_tokens > new_drafts);  // some drafts of two: the bound, not a smaller one
  }
}

TEST_CASE("spec decode: a proposer of garbage changes nothing", "[server][spec_decode]") {
  // spec_decode.garbage (tests/fixtures/spec_proposers.cpp): counts past the bound, tokens outside the
  // vocabulary, broken parent links, distributions that are not ones (which must not opt its drafts
  // into speculative sampling), and a failed call now and then.
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.garbage\" }\n")));
  SamplingParams greedy, sampled = all_options();
  for (const SamplingParams* sp : {&greedy, &sampled}) {
    INFO((sp == &greedy ? "greedy" : "sampled"));
    require_same(run_all(*spec, 100, *sp, true), run_all(*plain, 100, *sp, false));
  }
  CHECK(spec->status()["engines"][0]["speculation"]["drafts"].get<uint64_t>() > 0);
  CHECK(spec->status()["engines"][0]["speculation"]["propose_failures"].get<uint64_t>() > 0);
  CHECK(eventually([&] { return spec->status()["engines"][0]["kv"]["free_blocks"] == 512; }));
}

TEST_CASE("spec decode: the engine answers while its proposer computes (propose runs on the drafter's thread)",
          "[server][spec_decode][measured]") {
  // spec_decode.slow spends 200 ms in every propose, as a draft model's forward passes would. The
  // engine hands propose to its drafter actor and stays free: its status, asked all along, answers in
  // well within a propose's time. (With propose on the engine's own thread an answer would wait for
  // the propose under way.) A wall-clock bound: [measured], left out of the ThreadSanitizer run.
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.slow\" }\n")));
  auto request = request_for(*spec, "Once upon a time", 12);
  auto running = std::async(std::launch::async, [&] { return spec->gateway().generate(request); });
  double slowest = 0;
  size_t asked = 0;
  while (running.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    const auto started = std::chrono::steady_clock::now();
    const auto status = spec->status();
    slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    REQUIRE(status["engines"][0].contains("sequences"));
    ++asked;
  }
  const GenerateResult r = running.get();
  REQUIRE(r.finish_reason == "length");
  CHECK(metric_sum(*spec, "tokenhost_spec_draft_tokens_total", "spec_decode.slow") > 0);  // it proposed, and slowly:
  CHECK(asked >= 10);
  CHECK(slowest < 0.15);
}

TEST_CASE("spec decode: a proposer that throws across the ABI fails its requests, by name, and the engine serves on",
          "[server][spec_decode]") {
  // spec_decode.throws lets a C++ exception escape its fourth propose (a vendor's bug: the contract
  // forbids it). The call is a fault boundary: the request it was drafting for ends with an error that
  // names the plugin, its version, slot, engine and call; the slot is emptied, and the engine goes on
  // serving without drafts. Its create() throwing is refused as a failed create, by name.
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.throws\" }\n")));
  const GenerateResult faulted = spec->gateway().generate(request_for(*spec, "Once upon a time", 24));
  CHECK(faulted.finish_reason == "error");
  CHECK_THAT(faulted.error, Contains("plugin spec_decode.throws 1.0.0 (slot spec_decode, engine main) threw from propose: "
                                     "vendor bug: index out of range in propose()"));
  const auto engine = spec->status()["engines"][0];
  CHECK(engine["spec_decode"].is_null());  // emptied
  for (const std::string& prompt : story_prompts()) {
    const GenerateResult r = spec->gateway().generate(request_for(*spec, prompt, 8));
    CHECK(r.finish_reason == "length");
  }
  CHECK(eventually([&] { return spec->status()["engines"][0]["kv"]["free_blocks"] == 512; }));
  // A fresh instance proposes again (three good calls, then the fault again: the same boundary).
  REQUIRE_THAT(spec->set_slot("main", "spec_decode", "spec_decode.throws", {}), Contains("spec_decode.throws"));
  toml::table throwing;
  throwing.insert("throw_in_create", true);
  try {
    spec->set_slot("main", "spec_decode", "spec_decode.throws", throwing);
    FAIL("a create() that throws was accepted");
  } catch (const AdminError& e) {
    CHECK_THAT(e.what(), Contains("plugin spec_decode.throws 1.0.0 (slot spec_decode, engine main) threw from create: vendor bug: "
                                  "create() threw"));
  }
  spec->stop();
}

TEST_CASE("spec decode: drafts with their distributions follow the target's distribution (speculative sampling)",
          "[server][spec_decode]") {
  // spec_decode.sampled draws each draft token from q, uniform over the sequence's recent distinct
  // tokens, and writes q. The second token of a request is the first one a draft can give: over many
  // seeds, for the most frequent first token t1, the second token's frequencies must match the model's
  // tempered softmax after (prompt, t1), computed by the float64 reference forward pass (chi-square,
  // p = 0.001).
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.sampled\" }\n")));
  const std::string prompt = "Once upon a time";
  const int n = 2000;
  const float kTemperature = 0.6f;
  std::map<int32_t, std::vector<int32_t>> second;  // t1 -> the second tokens that followed it
  for (int base = 0; base < n; base += 16) {
    std::vector<std::future<GenerateResult>> f;
    for (int k = base; k < base + 16; ++k) {
      SamplingParams sp;
      sp.temperature = kTemperature;
      sp.seed = uint64_t(k) + 1;
      GenerateRequest r = story_request(*spec, prompt, 2, sp);
      r.ignore_eos = true;
      f.push_back(std::async(std::launch::async, [&spec, r] { return spec->gateway().generate(r); }));
    }
    for (auto& x : f) {
      const GenerateResult r = x.get();
      REQUIRE(r.error.empty());
      REQUIRE(r.tokens.size() == 2);
      second[r.tokens[0]].push_back(r.tokens[1]);
    }
  }
  const auto speculation = spec->status()["engines"][0]["speculation"];
  INFO(speculation.dump());
  REQUIRE(speculation["drafts"].get<uint64_t>() >= uint64_t(n) * 9 / 10);  // nearly every second token drafted
  CHECK(speculation["accepted_tokens"].get<uint64_t>() > 0);
  CHECK(speculation["accepted_tokens"].get<uint64_t>() < speculation["drafts"].get<uint64_t>());  // rejections too

  auto most = std::max_element(second.begin(), second.end(), [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  const int32_t t1 = most->first;
  const auto& seen = most->second;
  INFO("t1 " << t1 << " followed " << seen.size() << " times");
  REQUIRE(seen.size() >= 250);
  LoadedModel model = load_gguf_model(require_model_file("stories260K.gguf"), "stories260K");
  std::vector<int32_t> context = story_request(*spec, prompt, 1, {}).prompt;
  context.push_back(t1);
  const Vec logits = reference_forward(*model.weights, context).logits;
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - top) / kTemperature);
  std::map<int32_t, int> counts;
  for (int32_t t : seen) ++counts[t];
  // Tokens expected at least 5 times are their own bins, the rest one pooled bin.
  double chi2 = 0, pooled_expected = 0, pooled_seen = 0;
  int bins = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    const double expected = p[t] / sum * double(seen.size());
    const double got = counts.count(int32_t(t)) ? counts[int32_t(t)] : 0;
    if (expected >= 5) {
      chi2 += (got - expected) * (got - expected) / expected;
      ++bins;
    } else {
      pooled_expected += expected;
      pooled_seen += got;
    }
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected;
    ++bins;
  }
  // The chi-square 0.999 quantile with bins - 1 degrees of freedom (Wilson-Hilferty).
  const double df = bins - 1, z = 3.0902;
  const double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  INFO("chi-square " << chi2 << " over " << bins << " bins, critical " << critical);
  REQUIRE(bins >= 3);
  CHECK(chi2 < critical);
}

TEST_CASE("spec decode: the proposer swapped and unloaded under 16 streams loses nothing", "[server][spec_decode][swap]") {
  constexpr uint32_t kTokens = 32;
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.ngram\" }\n")));
  SteadyLoad load(*spec, outputs_alone(*plain, kTokens), 16, kTokens);
  load.wait_for(16);
  for (const char* next : {"spec_decode.suffix", "", "spec_decode.garbage", "spec_decode.sampled", "spec_decode.ngram"}) {
    INFO("to " << (*next ? next : "(none)"));
    if (*next) REQUIRE_THAT(spec->set_slot("main", "spec_decode", next, {}), Contains(next));
    else spec->unload_slot("main", "spec_decode");
    load.wait_for(16);
  }
  load.stop();
  INFO("first wrong: " << load.first_error());
  // Greedy requests: every proposer, spec_decode.sampled's distributions included, gives plain tokens.
  REQUIRE(load.wrong() == 0);
  const auto engine = spec->status()["engines"][0];
  CHECK(engine["speculation"]["drafts"].get<uint64_t>() > 0);
  CHECK(engine["kv_accounting"]["disagreements"] == 0);
  CHECK(eventually([&] { return spec->status()["engines"][0]["kv"]["free_blocks"] == 512; }));
}

TEST_CASE("spec decode: requests cancelled between verified steps free every block", "[server][spec_decode]") {
  auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest("spec_decode = { plugin = \"spec_decode.ngram\" }\n")));
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (int k = 0; k < 8; ++k) {
    GenerateRequest r = story_request(*spec, story_prompts()[size_t(k) % 4], 400, {});
    r.ignore_eos = true;
    streams.push_back(spec->gateway().start(r));
  }
  // Each cancelled once it has 60 tokens (by then ngram drafts have been verified), the others still running.
  for (auto& s : streams) {
    size_t seen = 0;
    for (int i = 0; i < 500 && seen < 60; ++i) seen += s->wait(seen, std::chrono::milliseconds(10)).tokens.size();
    s->cancel();
  }
  for (auto& s : streams) {
    std::optional<GenerateResult> result;
    for (size_t seen = 0, i = 0; i < 500 && !result; ++i) {
      auto update = s->wait(seen, std::chrono::milliseconds(10));
      seen += update.tokens.size();
      result = update.result;
    }
    REQUIRE(result);
    CHECK((result->finish_reason == "cancelled" || result->finish_reason == "length"));
  }
  CHECK(spec->status()["engines"][0]["speculation"]["drafts"].get<uint64_t>() > 0);
  CHECK(spec->status()["engines"][0]["kv_accounting"]["disagreements"] == 0);
  CHECK(eventually([&] { return spec->status()["engines"][0]["kv"]["free_blocks"] == 512; }));
}

TEST_CASE("spec decode: a draft model and the target's own first layers draft and every request gives plain decoding's tokens",
          "[server][spec_decode][draft_sessions]") {
  // The draft model: stories260K's Q8_0 copy (its 172-wide feed-forward stays f32), written here.
  TempDir dir;
  const std::string q8 = dir.file("stories260K-q8_0.gguf");
  gguf::quantize_file(require_model_file("stories260K.gguf"), q8, TH_DTYPE_Q8_0);
  const std::string draft_model = "\n[models.draft]\nsource = \"gguf\"\npath = \"" + q8 + "\"\ncontext_len = 512\n";
  auto plain = std::make_unique<Server>(read_deployment("plain.toml", stories_manifest("")));
  SamplingParams greedy, sampled = all_options();
  const std::vector<std::pair<std::string, std::string>> proposers = {
      {"spec_decode.draft", "spec_decode = { plugin = \"spec_decode.draft\", config = { model = \"draft\" } }\n" + draft_model},
      {"spec_decode.early_exit", "spec_decode = { plugin = \"spec_decode.early_exit\", config = { layers = 3 } }\n"}};
  for (const auto& [plugin, spec_text] : proposers) {
    INFO(plugin);
    auto spec = std::make_unique<Server>(read_deployment("spec.toml", stories_manifest(spec_text)));
    for (const SamplingParams* sp : {&greedy, &sampled}) {
      for (uint32_t max_tokens : {7u, 120u}) {
        for (bool concurrent : {false, true}) {
          INFO((sp == &greedy ? "greedy" : "sampled") << ", max_tokens " << max_tokens << (concurrent ? ", concurrent" : ", alone"));
          require_same(run_all(*spec, max_tokens, *sp, concurrent), run_all(*plain, max_tokens, *sp, false));
        }
      }
    }
    const double drafted = metric_sum(*spec, "tokenhost_spec_draft_tokens_total", plugin);
    const double accepted = metric_sum(*spec, "tokenhost_spec_accepted_tokens_total", plugin);
    INFO("drafted " << drafted << ", accepted " << accepted);
    CHECK(drafted > 0);
    CHECK(accepted > 0);
    // Every sequence ended: its draft session closed, the draft model's KV blocks all back.
    auto pools = [&] { return spec->status()["engines"][0]["speculation"]["draft_models"]; };
    INFO(pools().dump());
    REQUIRE(pools().size() == 1);
    CHECK(pools()[0]["n_layers"] == (plugin == "spec_decode.draft" ? 5 : 3));
    CHECK(pools()[0]["tokens_drafted"].get<uint64_t>() > 0);
    CHECK(eventually([&] { return pools()[0]["sessions"] == 0 && pools()[0]["kv_blocks_used"] == 0; }));
  }
}

TEST_CASE("spec decode: a draft model the deployment lacks or that has another vocabulary is refused at start",
          "[server][spec_decode][draft_sessions]") {
  const auto start_error = [](const std::string& spec_text) {
    try {
      Server server(read_deployment("spec.toml", stories_manifest(spec_text)));
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(started)");
  };
  CHECK_THAT(start_error("spec_decode = { plugin = \"spec_decode.draft\", config = { model = \"nope\" } }\n"),
             Contains("no model 'nope'"));
  CHECK_THAT(start_error("spec_decode = { plugin = \"spec_decode.draft\", config = { model = \"tiny\" } }\n"
                         "[models.tiny]\ndim = 32\nn_heads = 4\nn_layers = 1\nvocab_size = 300\n"),
             Contains("vocabulary of 300"));
  CHECK_THAT(start_error("spec_decode = { plugin = \"spec_decode.early_exit\", config = { layers = 9 } }\n"),
             Contains("layers = 9"));
}

}  // namespace server_spec_decode_tests
