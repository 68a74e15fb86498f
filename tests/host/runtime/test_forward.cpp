// The forward pass: RoPE's two layouts agree when the weights are permuted the way converters do,
// and a batch gives each sequence exactly the logits it gets alone.
#include <catch2/catch.hpp>

#include <cstring>

#include "harness.hpp"
#include "runtime/forward.hpp"
#include "runtime/synthetic_model.hpp"

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

struct Engine {
  std::shared_ptr<PluginInstance> attention, kvcache;
  explicit Engine(const ModelSpec& spec) {
    toml::table kv;
    kv.insert("block_size", 8);
    kv.insert("n_blocks", 128);
    attention = make_plugin("attention.reference", spec);
    kvcache = make_plugin("kvcache.paged", spec, kv);
  }
  std::vector<std::vector<float>> run(const ModelWeights& w, const StepBatch& b) {
    return forward_step(w, b, {attention.get(), kvcache.get(), nullptr});
  }
};

// Rows of a [n_heads * head_dim][cols] projection reordered within each head so that the pair
// (2i, 2i+1) of the NORM layout lands at (i, i + head_dim/2) of the NEOX layout.
std::vector<float> to_neox(const WeightView& w, size_t n_heads, size_t head_dim) {
  std::vector<float> out(size_t(w.rows * w.cols));
  const float* in = static_cast<const float*>(w.data);
  for (size_t h = 0; h < n_heads; ++h)
    for (size_t i = 0; i < head_dim / 2; ++i)
      for (size_t side = 0; side < 2; ++side) {
        size_t from = h * head_dim + 2 * i + side, to = h * head_dim + i + side * head_dim / 2;
        std::memcpy(&out[to * size_t(w.cols)], &in[from * size_t(w.cols)], size_t(w.cols) * sizeof(float));
      }
  return out;
}

}  // namespace

TEST_CASE("forward: NEOX RoPE on permuted weights gives the NORM model's logits", "[forward]") {
  auto rng = fresh_rng("forward rope");
  ModelSpec spec = model_spec(4, 2, 16, 2);
  auto norm = make_synthetic_weights(spec, rng());
  ModelWeights neox = *norm;
  neox.rope.neox = true;
  std::vector<std::vector<float>> keep;
  for (auto& layer : neox.layers) {
    keep.push_back(to_neox(layer.wq, spec.info.n_heads, spec.info.head_dim));
    layer.wq.data = keep.back().data();
    keep.push_back(to_neox(layer.wk, spec.info.n_kv_heads, spec.info.head_dim));
    layer.wk.data = keep.back().data();
  }
  StepItem item{1, 0, {}, true, nullptr};
  for (int i = 0; i < 20; ++i) item.tokens.push_back(int32_t(rng() % 256));
  Engine a(spec), b(spec);
  auto la = a.run(*norm, StepBatch{{item}});
  auto lb = b.run(neox, StepBatch{{item}});
  REQUIRE(la.size() == 1);
  for (size_t t = 0; t < la[0].size(); ++t) REQUIRE(lb[0][t] == Approx(la[0][t]).margin(1e-4).epsilon(1e-4));
  // And the layouts really differ: NEOX on the unpermuted weights gives other logits.
  ModelWeights wrong = *norm;
  wrong.rope.neox = true;
  Engine c(spec);
  auto lc = c.run(wrong, StepBatch{{item}});
  double diff = 0;
  for (size_t t = 0; t < la[0].size(); ++t) diff = std::max(diff, double(std::abs(lc[0][t] - la[0][t])));
  REQUIRE(diff > 1e-3);
}

TEST_CASE("forward: each sequence of a ragged batch gets the logits it gets alone, bit for bit", "[forward]") {
  auto rng = fresh_rng("forward batch");
  ModelSpec spec = model_spec(4, 1, 16, 2);
  auto w = make_synthetic_weights(spec, rng());
  std::vector<StepItem> items;
  for (uint64_t s = 1; s <= 6; ++s) {
    StepItem item{s, 0, {}, true, nullptr};
    size_t len = 1 + rng() % 40;
    for (size_t i = 0; i < len; ++i) item.tokens.push_back(int32_t(rng() % 256));
    items.push_back(item);
  }
  std::vector<std::vector<float>> alone;
  for (const auto& item : items) {
    Engine e(spec);
    alone.push_back(e.run(*w, StepBatch{{item}}).at(0));
  }
  Engine together(spec);
  auto batched = together.run(*w, StepBatch{items});
  REQUIRE(batched.size() == items.size());
  for (size_t s = 0; s < items.size(); ++s) REQUIRE(batched[s] == alone[s]);
}
