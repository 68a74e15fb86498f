// One engine's plugins around the CPU forward pass, for tests of it: attention.reference over
// kvcache.paged (and moe.topk for MoE models), a step at a time; random prompts, the relative difference
// of logits, and batch invariance.
#pragma once

#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "harness.hpp"
#include "reference_forward.hpp"
#include "backends/cpu/forward.hpp"

namespace tokenhost::testing {

// The plugins of one engine; moe.topk (renormalizing its top-k weights or not) for MoE models.
struct Engine {
  std::shared_ptr<PluginInstance> attention, kvcache, moe;
  explicit Engine(const ModelSpec& spec, bool normalize = true) {
    toml::table kv;
    kv.insert("block_size", 8);
    kv.insert("n_blocks", 128);
    attention = make_plugin("attention.reference", spec);
    kvcache = make_plugin("kvcache.paged", spec, kv);
    if (spec.info.n_experts > 0) {
      toml::table gating;
      gating.insert("weights", normalize ? "normalized" : "softmax");
      moe = make_plugin("moe.topk", spec, gating);
    }
  }
  std::vector<std::vector<float>> run(const ModelWeights& w, const StepBatch& b) {
    SlotInstances instances;
    instances.set(slot_of(TH_KIND_ATTENTION), attention);
    instances.set(slot_of(TH_KIND_KVCACHE), kvcache);
    instances.set(slot_of(TH_KIND_MOE), moe);
    return forward_step(w, b, {&instances});
  }
};

inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t max_len, uint32_t vocab) {
  std::vector<int32_t> tokens(1 + rng() % max_len);
  for (auto& t : tokens) t = int32_t(rng() % vocab);
  return tokens;
}

// max |a - b| / max |b|
inline double relative_diff(const std::vector<float>& a, const Vec& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    mag = std::max(mag, std::abs(b[i]));
  }
  return diff / mag;
}
inline double relative_diff(const Vec& a, const Vec& b) { return relative_diff(std::vector<float>(a.begin(), a.end()), b); }

// Each of a ragged batch of random sequences gets, bit for bit, the logits it gets alone.
inline void check_batch_invariance(const ModelWeights& w, std::mt19937_64& rng) {
  std::vector<StepItem> items;
  for (uint64_t s = 1; s <= 6; ++s) items.push_back(StepItem{s, 0, random_tokens(rng, 40, w.spec.info.vocab_size), true, nullptr});
  std::vector<std::vector<float>> alone;
  for (const auto& item : items) {
    Engine e(w.spec);
    alone.push_back(e.run(w, StepBatch{{item}}).at(0));
  }
  Engine together(w.spec);
  auto batched = together.run(w, StepBatch{items});
  REQUIRE(batched.size() == items.size());
  for (size_t s = 0; s < items.size(); ++s) REQUIRE(batched[s] == alone[s]);
}

}  // namespace tokenhost::testing
