// The worker's constraints (actors/constraints.hpp) through constraint.gbnf: each row of a step's
// sampled items gets the tokens its text allows (a draft row its parent row's text and its draft
// token; a row no accepted path reaches is not live), the state catches up with the tokens the engine
// appended, one program serves every sequence of a source, and the failures are the item's alone.
#include <catch2/catch.hpp>

#include <cmath>

#include "actors/constraints.hpp"
#include "plugin/catalog.hpp"
#include "runtime/sampling.hpp"
#include "runtime/synthetic_model.hpp"

namespace constraints_tests {

using namespace tokenhost;

namespace {

// 0 <eos>, 1 "a", 2 "b", 3 "ab", 4 "!", 5 "x", 6 <control>, 7 "\xc3" and 8 "\xa9" (é in two tokens), 9 "é"
const std::vector<std::string> kTexts = {"", "a", "b", "ab", "!", "x", "", "\xc3", "\xa9", "\xc3\xa9"};

std::shared_ptr<const PluginVocab> vocab() { return plugin_vocab(kTexts, 0); }

std::shared_ptr<PluginInstance> gbnf_plugin() {
  static PluginCatalog catalog(default_plugin_paths());
  catalog.scan();
  ModelSpec model;
  model.name = "tiny";
  model.info.vocab_size = uint32_t(kTexts.size());
  return instantiate(catalog, "constraint.gbnf", "test", model, {}, nullptr, nullptr, vocab());
}

std::shared_ptr<SequenceContext> context(const std::string& grammar, std::vector<int32_t> prompt) {
  auto c = std::make_shared<SequenceContext>(SamplingParams{});
  auto source = std::make_shared<ConstraintSource>();
  source->type = "gbnf";
  source->text = source->gbnf = grammar;
  c->constraint = source;
  c->tokens = std::move(prompt);
  c->prompt_tokens = c->tokens.size();
  return c;
}

std::vector<int32_t> allowed(const RowMasks& m, size_t row) {
  std::vector<float> logits(kTexts.size(), 0.0f);
  if (!m.apply(row, logits)) return {};
  std::vector<int32_t> out;
  for (size_t t = 0; t < logits.size(); ++t)
    if (logits[t] != -INFINITY) out.push_back(int32_t(t));
  return out;
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("constraints: a draft's rows each allow what their text allows, rows past a refused draft token are not live",
          "[constraint][worker]") {
  auto plugin = gbnf_plugin();
  Constraints constraints("e");
  const std::string grammar = "root ::= \"a\" \"b\"+ \"!\"";
  StepItem item;
  item.seq_id = 1;
  item.sample = true;
  item.context = context(grammar, {5, 5});
  // The last prompt token, then a draft: "a", "b", "x" (refused after "ab"), "!".
  item.tokens = {5, 1, 2, 5, 4};
  item.n_draft = 4;
  item.logit_rows = 5;
  StepBatch batch{{item}};
  const std::vector<RowMasks> masks = constraints.prepare(plugin, batch);
  REQUIRE(masks.size() == 1);
  REQUIRE(masks[0].error.empty());
  CHECK(allowed(masks[0], 0) == Ids{1, 3});     // "a" or "ab"
  CHECK(allowed(masks[0], 1) == Ids{2});        // after "a": "b"
  CHECK(allowed(masks[0], 2) == Ids{2, 4});     // after "ab": "b" or "!"
  CHECK(masks[0].live == std::vector<uint8_t>{1, 1, 1, 0, 0});  // "x" left the constraint: rows 3 and 4 unreachable
  CHECK(constraints.programs() == 1);
}

TEST_CASE("constraints: a tree's rows follow their parents, the end of sequence is allowed where the text is complete",
          "[constraint][worker]") {
  auto plugin = gbnf_plugin();
  Constraints constraints("e");
  StepItem item;
  item.seq_id = 2;
  item.sample = true;
  item.context = context("root ::= \"a\" \"b\"? | \"\xc3\xa9\"", {5});
  // Children of the root: "a" (0), "\xc3" (1); "b" under "a" (2); "\xa9" under "\xc3" (3).
  item.tokens = {5, 1, 7, 2, 8};
  item.n_draft = 4;
  item.draft_parent = {-1, -1, 0, 1};
  item.logit_rows = 5;
  const std::vector<RowMasks> masks = constraints.prepare(plugin, StepBatch{{item}});
  REQUIRE(masks[0].error.empty());
  CHECK(allowed(masks[0], 0) == Ids{1, 3, 7, 9});  // a, ab, the first byte of é, é
  CHECK(allowed(masks[0], 1) == Ids{0, 2});        // after "a": complete (EOS) or "b"
  CHECK(allowed(masks[0], 2) == Ids{8});           // after the first byte of é: its second
  CHECK(allowed(masks[0], 3) == Ids{0});           // after "ab": only the end
  CHECK(allowed(masks[0], 4) == Ids{0});           // after é: only the end
}

TEST_CASE("constraints: a state catches up with the generated tokens, one program per source, failures stay the item's",
          "[constraint][worker]") {
  auto plugin = gbnf_plugin();
  Constraints constraints("e");
  const std::string grammar = "root ::= \"a\" \"b\"+ \"!\"";
  StepItem one;
  one.seq_id = 1;
  one.sample = true;
  one.context = context(grammar, {5});
  one.tokens = {5};
  StepItem two = one;
  two.seq_id = 2;
  two.context = context(grammar, {5, 5, 5});
  StepItem free;  // unconstrained
  free.seq_id = 3;
  free.sample = true;
  free.tokens = {5};
  StepItem bad = one;  // a generated token its grammar refuses (the plugin was swapped for another language, say)
  bad.seq_id = 4;
  bad.context = context(grammar, {5});
  bad.context->tokens.push_back(4);
  auto masks = constraints.prepare(plugin, StepBatch{{one, two, free, bad}});
  REQUIRE(masks.size() == 4);
  CHECK(allowed(masks[0], 0) == Ids{1, 3});
  CHECK(allowed(masks[1], 0) == Ids{1, 3});
  CHECK_FALSE(masks[2].constrained());
  CHECK_THAT(masks[3].error, Catch::Contains("refused generated token 4"));
  CHECK(constraints.programs() == 1);
  CHECK(constraints.sequences() == 2);
  // The engine appended "ab" and "b" to sequence 1 (and the end of sequence, ignored): its next rows
  // continue from "abb".
  one.context->tokens.insert(one.context->tokens.end(), {3, 2});
  one.tokens = {2};
  masks = constraints.prepare(plugin, StepBatch{{one}});
  CHECK(allowed(masks[0], 0) == Ids{2, 4});
  constraints.release(1);
  constraints.release(2);
  CHECK(constraints.sequences() == 0);
  // A swapped plugin (another instance): the state is rebuilt from the generated tokens on it, and the
  // old instance's program goes.
  auto swapped = gbnf_plugin();
  one.context->tokens = {5, 3};
  one.tokens = {3};
  masks = constraints.prepare(swapped, StepBatch{{one}});
  CHECK(allowed(masks[0], 0) == Ids{2, 4});
  CHECK(constraints.programs() == 1);
  CHECK(constraints.sequences() == 1);
  constraints.release(1);
  // No plugin: the item fails, naming the slot.
  masks = constraints.prepare(nullptr, StepBatch{{two}});
  CHECK_THAT(masks[0].error, Catch::Contains("constraint slot is empty"));
}

TEST_CASE("constraints: sampling under a mask never draws a disallowed token and reports no masked log-probability",
          "[constraint][sampling]") {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_logprobs = 5;
  p.seed = 42;
  Sampler sampler(p);
  std::vector<float> logits = {3.0f, -INFINITY, 2.0f, -INFINITY, -INFINITY, 0.5f};
  for (int i = 0; i < 2000; ++i) {
    const SampledToken t = sampler.sample(logits, {});
    REQUIRE((t.token == 0 || t.token == 2 || t.token == 5));
    REQUIRE(std::isfinite(t.logprob));
    REQUIRE(std::isfinite(t.entropy));
    REQUIRE(t.top.size() == 3);
  }
  SamplingParams greedy;
  Sampler g(greedy);
  CHECK(g.sample({-INFINITY, -1.0f, -INFINITY}, {}).token == 1);
}

}  // namespace constraints_tests
