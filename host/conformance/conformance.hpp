// The conformance runner: checks one plugin library against the rules of its kind, as a vendor runs
// it on its own .so (tokenhost-conformance PLUGIN.toml) and the test suite runs it on every in-tree
// plugin. Each rule is checked on fresh random inputs (the seed is printed, and replays them) through
// the real loader, so the plugin is driven exactly as the host drives it.
//
// Rules by kind (the names a report and a failure use):
//   attention    attention.matches_reference.f32 / .f16: forward() over random ragged batches (prefill
//                chunks and decode rows, GQA, padded row strides, two KV layouts' strides, block tables
//                out of order) equals float64 attention
//   kvcache      kvcache.layout_fits_model (dims, dtype, and the 1.2 device when the layout has it),
//                kvcache.accounting (used + free == total, shared and
//                n_seqs exact, block tables as long as their sequences, over random reserve/fork/free),
//                kvcache.copy_on_write, kvcache.exhaustion_changes_nothing, kvcache.free_returns_blocks
//   scheduler    scheduler.decision_valid (known ids once each, prefill within the prompt, decode one
//                token, budgets, preempt only running; with 1.3 clients), scheduler.older_host_state (a 1.2-sized
//                state), scheduler.makes_progress
//   router       router.target_valid, router.prefers_healthy, router.deterministic
//   moe          moe.gate_valid (ids in range and distinct per token, weights finite and >= 0),
//                moe.experts_match_reference (float64 SwiGLU experts, weighted)
//   spec_decode  spec_decode.drafts_valid (at most max_draft, parents before their children)
//   kv_connector kv_connector.round_trip.f32 / .f16 / .q8_0 (saved blocks load back byte for byte into
//                other blocks; the bytes are read during save()), kv_connector.contains_leading (stops at
//                the first missing key, never across namespaces), kv_connector.cancel_completes (a
//                cancelled load still completes once; stats within capacity); every rule checks that each
//                transfer completes exactly once with a count within its blocks
//   constraint   constraint.masks_match_grammar (on random walks through JSON, JSON Schema and GBNF
//                sources over a fresh random vocabulary: each token allowed exactly when the SDK's GBNF
//                matcher takes its bytes, completeness the same, a batched call equal to single ones,
//                every allowed token advancing and a refused one leaving the state as it was),
//                constraint.clone_independent, constraint.bad_source_refused
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "plugin/catalog.hpp"

namespace tokenhost::conformance {

struct Options {
  uint64_t seed = 0;
  uint32_t rounds = 12;  // random cases per rule
};

// One rule's outcome: passed, failed (why), or not applicable (check() refused what the rule needs).
struct Outcome {
  std::string rule;
  enum class Verdict { passed, failed, not_applicable } verdict = Verdict::passed;
  std::string detail;
};

// Collects outcomes; a rule's first failure is kept, later rounds of a failed rule are not run.
class Report {
 public:
  // Runs check (which throws RuleFailed, or any exception, on a violation) for rule.
  void rule(const std::string& name, const std::function<void()>& check);
  void not_applicable(const std::string& name, const std::string& why);
  const std::vector<Outcome>& outcomes() const { return outcomes_; }
  size_t count(Outcome::Verdict v) const;

 private:
  std::vector<Outcome> outcomes_;
};

// A violated rule: what was wrong, with the numbers.
struct RuleFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw RuleFailed(what);
}

using Rng = std::mt19937_64;
inline uint32_t uniform(Rng& rng, uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); }
inline float normal(Rng& rng) { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }

// A small model shape for instances of the plugin under test.
ModelSpec model_shape(uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, th_dtype kv_dtype,
                      uint32_t n_experts = 0, uint32_t n_experts_used = 0);

// An instance of the plugin for model (its plugin.toml defaults as config), or NULL with why set when
// its check() refuses the model. drafts: the draft sessions it may open (spec_decode, ABI 1.5).
std::shared_ptr<PluginInstance> instance_for(PluginCatalog& catalog, const PluginManifest& plugin,
                                             const ModelSpec& model, std::string& why,
                                             std::shared_ptr<DraftSessionHost> drafts = nullptr,
                                             std::shared_ptr<const PluginVocab> vocab = nullptr);

void attention_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void kvcache_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void scheduler_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void router_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void moe_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void spec_decode_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void kv_connector_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);
void constraint_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r);

// Loads the plugin that manifest_path declares and checks every rule of its kind. Throws PluginError or
// ManifestError when it cannot be loaded at all.
Report run(const std::string& manifest_path, const Options& options);

}  // namespace tokenhost::conformance
