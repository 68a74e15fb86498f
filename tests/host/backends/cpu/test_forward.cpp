// The forward pass: RoPE's two layouts agree when the weights are permuted the way converters do; MoE
// models (routed experts through moe.topk, with or without a shared expert, gated or not) match a
// float64 reference; a batch gives each sequence exactly the logits it gets alone.
#include <catch2/catch.hpp>

#include <tokenhost/plugin_kv.hpp>

#include <cstring>

#include "files.hpp"
#include "harness.hpp"
#include "reference_forward.hpp"
#include "forward_engine.hpp"
#include "backends/backend.hpp"
#include "backends/cpu/forward.hpp"
#include "runtime/gguf_model.hpp"
#include "model/quant.hpp"
#include "runtime/make_model.hpp"
#include "backends/cpu/matmul.hpp"
#include "runtime/synthetic_model.hpp"

namespace cpu_forward_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// A small MoE model written by make-model (f32: moe.topk computes f32 experts) and read back.
std::shared_ptr<const ModelWeights> moe_model(uint64_t seed, const std::string& arch, uint32_t n_shared, bool gate) {
  TempDir dir;
  MakeModelOptions o;
  o.path = dir.file("moe.gguf");
  o.seed = seed;
  o.scale = 0.1f;  // large enough that every part of a layer moves the logits
  o.shape.dim = 64;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.ffn_dim = 32;
  o.shape.vocab_size = 300;
  o.shape.context_len = 128;
  o.shape.n_experts = 4;
  o.shape.n_experts_used = 2;
  o.shape.n_shared_experts = n_shared;
  o.shape.shared_ffn_dim = n_shared ? 48 : 0;
  o.shape.shared_expert_gate = gate;
  o.shape.architecture = arch;
  make_model(o);
  return load_gguf_model(o.path, "moe").weights;  // the mapping outlives the file's removal
}

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

// An engine's KV layout and the block table of its sequence 1.
std::pair<const th_kv_layout*, std::vector<int32_t>> layout_and_table(Engine& e) {
  const auto& vt = e.kvcache->vtable<th_kvcache_vtable>();
  const th_kv_layout* layout = nullptr;
  const int32_t* blocks = nullptr;
  uint32_t n = 0;
  th_error err;
  REQUIRE(vt.get_layout(e.kvcache->handle(), &layout, &err) == TH_OK);
  REQUIRE(vt.seq_blocks(e.kvcache->handle(), 1, &blocks, &n, &err) == TH_OK);
  return {layout, std::vector<int32_t>(blocks, blocks + n)};
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
  check_batch_invariance(*make_synthetic_weights(model_spec(4, 1, 16, 2), rng()), rng);
}

TEST_CASE("forward: batch invariance holds over an f16 KV cache", "[forward]") {
  auto rng = fresh_rng("forward batch f16 kv");
  ModelSpec spec = model_spec(8, 2, 16, 2);
  spec.info.kv_dtype = TH_DTYPE_F16;
  check_batch_invariance(*make_synthetic_weights(spec, rng()), rng);
}

TEST_CASE("forward: an f16 KV cache holds each key and value rounded to f16, and the logits follow",
          "[forward]") {
  auto rng = fresh_rng("forward f16 kv");
  ModelSpec spec = model_spec(8, 2, 16, 2);
  auto w = make_synthetic_weights(spec, rng());
  const std::vector<int32_t> tokens = random_tokens(rng, 60, spec.info.vocab_size);
  const StepBatch batch{{StepItem{1, 0, tokens, true, nullptr}}};
  Engine f32(spec);
  const auto logits32 = f32.run(*w, batch);
  spec.info.kv_dtype = TH_DTYPE_F16;
  Engine f16(spec);
  const auto logits16 = f16.run(*w, batch);
  REQUIRE(logits16.size() == 1);
  // Layer 0's keys and values do not depend on the attention before them: the f16 cache holds the f32
  // cache's values rounded to nearest, bit for bit.
  const auto [l32, t32] = layout_and_table(f32);
  const auto [l16, t16] = layout_and_table(f16);
  REQUIRE(l16->dtype == TH_DTYPE_F16);
  size_t compared = 0;
  for (uint32_t p = 0; p < tokens.size(); ++p)
    for (uint32_t h = 0; h < spec.info.n_kv_heads; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        auto at = [&](const th_kv_layout* l, const std::vector<int32_t>& t) {
          return static_cast<const char*>(kv == 0 ? l->k_base : l->v_base) +
                 int64_t(t[p / l->block_size]) * l->block_stride + int64_t(h) * l->head_stride +
                 int64_t(p % l->block_size) * l->token_stride;
        };
        const auto* x = reinterpret_cast<const float*>(at(l32, t32));
        const auto* y = reinterpret_cast<const uint16_t*>(at(l16, t16));
        for (uint32_t d = 0; d < spec.info.head_dim; ++d, ++compared) REQUIRE(y[d] == quant::f32_to_fp16(x[d]));
      }
  CHECK(compared == tokens.size() * spec.info.n_kv_heads * spec.info.head_dim * 2);
  // The logits: near the f32 cache's (f16 keeps 11 significant bits), but not the same.
  const double diff = relative_diff(logits16[0], Vec(logits32[0].begin(), logits32[0].end()));
  INFO(tokens.size() << " tokens: relative difference to the f32 cache's logits " << diff);
  CHECK(diff < 2e-3);
  CHECK(diff > 0);
}

TEST_CASE("forward: a q8_0 KV cache holds each key and value as the format quantizes them, and the logits follow",
          "[forward][q8_0]") {
  auto rng = fresh_rng("forward q8_0 kv");
  ModelSpec spec = model_spec(8, 2, 16, 2);
  auto w = make_synthetic_weights(spec, rng());
  const std::vector<int32_t> tokens = random_tokens(rng, 60, spec.info.vocab_size);
  const StepBatch batch{{StepItem{1, 0, tokens, true, nullptr}}};
  Engine f32(spec);
  const auto logits32 = f32.run(*w, batch);
  spec.info.kv_dtype = TH_DTYPE_Q8_0;
  Engine q8(spec);
  const auto logits8 = q8.run(*w, batch);
  REQUIRE(logits8.size() == 1);
  const auto [l32, t32] = layout_and_table(f32);
  const auto [l8, t8] = layout_and_table(q8);
  REQUIRE(l8->dtype == TH_DTYPE_Q8_0);
  // Layer 0's keys and values: the q8_0 cache holds the f32 cache's values as quantize_kv_q8 makes them
  // (th_kvcache.h's format), elements and group scales bit for bit.
  const uint32_t hd = spec.info.head_dim, groups = hd / l8->quant_group;
  std::vector<int8_t> q(hd);
  std::vector<float> scales(groups);
  size_t compared = 0;
  for (uint32_t p = 0; p < tokens.size(); ++p)
    for (uint32_t h = 0; h < spec.info.n_kv_heads; ++h)
      for (bool values : {false, true}) {
        const auto* x = sdk::kv_head_vector(*l32, values ? l32->v_base : l32->k_base, 0, t32[p / l32->block_size], p % l32->block_size, h);
        sdk::quantize_kv_q8(x, hd, l8->quant_group, q.data(), scales.data());
        const int32_t block = t8[p / l8->block_size];
        const auto* got = reinterpret_cast<const int8_t*>(sdk::kv_head_bytes(*l8, values ? l8->v_base : l8->k_base, 0, block, p % l8->block_size, h));
        const float* got_scales = sdk::kv_head_scales(*l8, values ? l8->v_scale_base : l8->k_scale_base, 0, block, p % l8->block_size, h);
        for (uint32_t d = 0; d < hd; ++d, ++compared) REQUIRE(got[d] == q[d]);
        for (uint32_t g = 0; g < groups; ++g) REQUIRE(got_scales[g] == scales[g]);
      }
  CHECK(compared == tokens.size() * spec.info.n_kv_heads * hd * 2);
  // The logits: near the f32 cache's (8 bits a group's step), but not the same.
  const double diff = relative_diff(logits8[0], Vec(logits32[0].begin(), logits32[0].end()));
  INFO(tokens.size() << " tokens: relative difference to the f32 cache's logits " << diff);
  CHECK(diff < 3e-2);
  CHECK(diff > 0);
}

TEST_CASE("forward: batch invariance holds for an MoE model with a gated shared expert", "[forward][moe]") {
  auto rng = fresh_rng("forward moe batch");
  check_batch_invariance(*moe_model(rng(), "llama", 1, true), rng);
}

TEST_CASE("forward: an MoE model without a moe plugin is refused with a message, not run", "[forward][moe]") {
  auto rng = fresh_rng("forward moe without plugin");
  auto w = moe_model(rng(), "llama", 0, false);
  Engine engine(w->spec);
  engine.moe.reset();
  CHECK_THROWS_WITH(engine.run(*w, StepBatch{{StepItem{1, 0, {1, 2, 3}, true, nullptr}}}),
                    Catch::Contains("4 experts per layer: its forward pass needs a moe plugin"));
}

TEST_CASE("forward: a qwen3 model (per-head query and key norms) matches a float64 reference, and the norms count",
          "[forward][qwen3]") {
  auto rng = fresh_rng("forward qwen3 reference");
  TempDir dir;
  MakeModelOptions o;
  o.path = dir.file("qwen3.gguf");
  o.seed = rng();
  o.scale = 0.1f;
  o.shape.dim = 64;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.ffn_dim = 96;
  o.shape.vocab_size = 300;
  o.shape.context_len = 128;
  o.shape.architecture = "qwen3";
  make_model(o);
  auto w = load_gguf_model(o.path, "qwen3").weights;
  REQUIRE(w->rope.neox);
  REQUIRE(w->layers[0].q_norm.rows * w->layers[0].q_norm.cols == 16);  // head_dim
  REQUIRE(w->layers[0].bq.empty());
  // Two positions at least: over one, attention's softmax is 1 whatever the queries and keys.
  std::vector<int32_t> tokens = random_tokens(rng, 24, w->spec.info.vocab_size);
  if (tokens.size() == 1) tokens.push_back(int32_t(rng() % w->spec.info.vocab_size));
  const ReferenceOutput ref = reference_forward(*w, tokens);
  Engine engine(w->spec);
  auto logits = engine.run(*w, StepBatch{{StepItem{1, 0, tokens, true, nullptr}}});
  REQUIRE(relative_diff(logits[0], ref.logits) < 1e-5);
  ModelWeights unnormed = *w;
  for (auto& layer : unnormed.layers) layer.q_norm = layer.k_norm = {};
  REQUIRE(relative_diff(reference_forward(unnormed, tokens).logits, ref.logits) > 1e-2);
  check_batch_invariance(*w, rng);
}

// llama.cpp's logits for files make-model writes, pinned: the repository does not build llama.cpp. Recorded
// with llama.cpp 3f545becc (CPU, one thread, an f32 KV cache, flash attention off: its CPU kernel rounds
// through f16, 2e-3 away from its own plain attention here) from
//   tokenhost make-model M.gguf --arch A --seed 7 --scale 0.1 --dim 64 --heads 4 --kv-heads 2 --ffn F
//       --vocab 300 --context 128 --layers 2 [--experts 4 --experts-used 2]
// (F = 96; qwen3moe: F = 32 with the experts) by a program that decodes kPinnedTokens in one batch
// (llama_batch_get_one) and prints llama_get_logits_ith(ctx, -1): every 23rd logit of the last position
// is kept, and its argmax. Both sides compute in f32 from f32 weights, so they differ by rounding only.
TEST_CASE("forward: llama, qwen2, qwen3 and qwen3moe files from make-model give llama.cpp's logits", "[forward][qwen3]") {
  const std::vector<int32_t> kPinnedTokens = {1, 17, 42, 99, 123, 7, 256, 88, 3, 150, 201, 64};
  struct Pinned {
    const char* arch;
    uint32_t ffn, experts, experts_used;
    std::vector<float> every_23rd;  // logits 0, 23, 46, ... of the last position
    int argmax;
  };
  const Pinned pinned[] = {
      {"qwen3", 96, 0, 0, {0.09507f, 0.91061f, 0.57036f, -0.90083f, 0.28936f, 0.83620f, -0.03248f, -0.02545f, 1.13592f, -1.02145f, -0.02592f, 1.54351f, 0.93242f, -0.63396f}, 145},
      {"llama", 96, 0, 0, {-0.78406f, -0.42325f, -0.93715f, 0.36782f, 0.17523f, -0.11620f, -1.30017f, 0.59860f, -0.91611f, 0.77661f, -0.16720f, 0.17646f, 0.95489f, -0.69197f}, 114},
      {"qwen2", 96, 0, 0, {-0.11099f, 1.29037f, -0.95681f, -0.36395f, 0.16820f, 0.37654f, 1.75572f, -0.65987f, 1.94737f, 0.85104f, 1.16699f, 0.92293f, 1.35646f, -0.40407f}, 26},
      {"qwen3moe", 32, 4, 2, {0.29169f, 1.32182f, -0.42058f, -1.73028f, 0.62686f, -0.59210f, 0.49447f, -0.21016f, 0.55380f, 0.63009f, 0.40848f, -0.39354f, 1.35326f, 0.83313f}, 33},
  };
  for (const Pinned& p : pinned) {
    INFO(p.arch);
    TempDir dir;
    MakeModelOptions o;
    o.path = dir.file("m.gguf");
    o.seed = 7;
    o.scale = 0.1f;
    o.shape.dim = 64;
    o.shape.n_heads = 4;
    o.shape.n_kv_heads = 2;
    o.shape.ffn_dim = p.ffn;
    o.shape.vocab_size = 300;
    o.shape.context_len = 128;
    o.shape.n_layers = 2;
    o.shape.n_experts = p.experts;
    o.shape.n_experts_used = p.experts_used;
    o.shape.architecture = p.arch;
    make_model(o);
    auto w = load_gguf_model(o.path, "m").weights;
    Engine engine(w->spec);  // qwen3moe renormalizes its top-k weights, as moe.topk does by default
    auto logits = engine.run(*w, StepBatch{{StepItem{1, 0, kPinnedTokens, true, nullptr}}});
    REQUIRE(logits.size() == 1);
    REQUIRE(logits[0].size() == 300);
    CHECK(std::max_element(logits[0].begin(), logits[0].end()) - logits[0].begin() == p.argmax);
    double worst = 0;
    for (size_t i = 0; i < p.every_23rd.size(); ++i)
      worst = std::max(worst, std::abs(double(logits[0][23 * i]) - p.every_23rd[i]));
    INFO("largest difference " << worst);
    CHECK(worst < 2e-5);  // measured up to 5.4e-6, the pins' own rounding being 5e-6
  }
}

TEST_CASE("forward: MoE models match a float64 reference, with no shared expert, a shared one, a gated one", "[forward][moe]") {
  auto rng = fresh_rng("forward moe reference");
  struct Variant {
    const char* name;
    std::string arch;
    uint32_t n_shared;
    bool gate, normalize;
  };
  const Variant variants[] = {{"routed experts only", "llama", 0, false, true},
                              {"shared expert (DeepSeek-like)", "llama", 1, false, true},
                              {"gated shared expert", "llama", 1, true, true},
                              {"qwen2moe (gated shared expert, unnormalized top-k)", "qwen2moe", 1, true, false},
                              {"qwen3moe (per-head query and key norms, routed experts)", "qwen3moe", 0, false, true}};
  for (const Variant& v : variants) {
    INFO(v.name);
    auto w = moe_model(rng(), v.arch, v.n_shared, v.gate);
    REQUIRE(w->layers[0].shared_expert.empty() == (v.n_shared == 0));
    REQUIRE(w->layers[0].shared_expert_gate.empty() == !v.gate);
    // A fresh prompt whose routing is clear: float rounding cannot choose other experts than float64.
    std::vector<int32_t> tokens;
    ReferenceOutput ref;
    for (int tries = 0; tries < 20 && ref.logits.empty(); ++tries) {
      tokens = random_tokens(rng, 24, w->spec.info.vocab_size);
      if (tokens.size() == 1) tokens.push_back(int32_t(rng() % w->spec.info.vocab_size));  // two: the norms count
      ref = reference_forward(*w, tokens, v.normalize);
      if (ref.router_margin < 1e-3) ref.logits.clear();
    }
    REQUIRE_FALSE(ref.logits.empty());
    Engine engine(w->spec, v.normalize);
    auto logits = engine.run(*w, StepBatch{{StepItem{1, 0, tokens, true, nullptr}}});
    REQUIRE(logits.size() == 1);
    INFO(tokens.size() << " tokens");
    REQUIRE(relative_diff(logits[0], ref.logits) < 1e-5);
    // The reference sees each part: without the shared expert, or its gate, the logits are others.
    if (v.n_shared > 0) {
      ModelWeights without = *w;
      for (auto& layer : without.layers) layer.shared_expert = {};
      REQUIRE(relative_diff(reference_forward(without, tokens, v.normalize).logits, ref.logits) > 1e-2);
    }
    if (v.arch == "qwen3moe") {  // and the per-head norms
      REQUIRE_FALSE(w->layers[0].q_norm.empty());
      ModelWeights unnormed = *w;
      for (auto& layer : unnormed.layers) layer.q_norm = layer.k_norm = {};
      REQUIRE(relative_diff(reference_forward(unnormed, tokens, v.normalize).logits, ref.logits) > 1e-2);
    }
    if (v.gate) {
      ModelWeights ungated = *w;
      for (auto& layer : ungated.layers) layer.shared_expert_gate = {};
      REQUIRE(relative_diff(reference_forward(ungated, tokens, v.normalize).logits, ref.logits) > 1e-2);
    }
  }
}

TEST_CASE("forward: a quantized model packed at load gives the logits it gives unpacked, bit for bit", "[forward]") {
  auto rng = fresh_rng("forward packed weights");
  for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0}) {
    TempDir dir;
    MakeModelOptions o;
    o.path = dir.file("q.gguf");
    o.seed = rng();
    o.type = type;
    o.shape.dim = 256;  // 8 blocks: a half group per row; the FFN's 768 (24 blocks) a group and a half
    o.shape.n_heads = 4;
    o.shape.n_kv_heads = 2;
    o.shape.ffn_dim = 768;
    o.shape.vocab_size = 300;
    o.shape.context_len = 128;
    make_model(o);
    auto plain = load_gguf_model(o.path, "plain").weights;
    auto packed = find_backend(TH_DEVICE_CPU)->place_weights(plain, 0, WeightPlacement{});
    REQUIRE(plain->packed_bytes == 0);
    if (packed->packed_bytes == 0) {
      WARN("the kernel set " << matmul_kernels() << " has no packed layout for " << quant::dtype_name(type));
      continue;
    }
    std::vector<StepItem> items;
    for (uint64_t s = 1; s <= 3; ++s) items.push_back(StepItem{s, 0, random_tokens(rng, 20, 300), true, nullptr});
    for (size_t batch : {size_t(1), items.size()}) {  // one row of logits, and a batch of prompts
      INFO(quant::dtype_name(type) << ", " << batch << " sequences");
      const StepBatch b{std::vector<StepItem>(items.begin(), items.begin() + long(batch))};
      Engine e1(packed->spec), e2(plain->spec);
      REQUIRE(e1.run(*packed, b) == e2.run(*plain, b));
    }
  }
}

TEST_CASE("forward: every row an item marks gets the logits its prefix gets alone, in item then row order",
          "[forward]") {
  auto rng = fresh_rng("forward marked rows");
  const auto w = make_synthetic_weights(model_spec(4, 2, 16, 2), rng());
  const uint32_t vocab = w->spec.info.vocab_size;
  auto alone = [&](const std::vector<int32_t>& prefix) {
    Engine e(w->spec);
    return e.run(*w, StepBatch{{StepItem{1, 0, prefix, true, nullptr}}}).at(0);
  };
  for (int round = 0; round < 4; ++round) {
    // Sequence 1 has its first p tokens in the cache already and marks every row of the next ones
    // (a draft's positions); sequence 2 is sampled as usual (its last row only).
    std::vector<int32_t> a = random_tokens(rng, 24, vocab), b = random_tokens(rng, 12, vocab);
    if (a.size() < 2) a.push_back(int32_t(rng() % vocab));
    const uint32_t p = 1 + uint32_t(rng() % (a.size() - 1));
    Engine e(w->spec);
    REQUIRE(e.run(*w, StepBatch{{StepItem{1, 0, {a.begin(), a.begin() + p}, false, nullptr}}}).empty());
    StepItem draft{1, p, {a.begin() + p, a.end()}, true, nullptr};
    draft.logit_rows = uint32_t(a.size()) - p;
    const auto out = e.run(*w, StepBatch{{draft, StepItem{2, 0, b, true, nullptr}}});
    INFO("p = " << p << " of " << a.size());
    REQUIRE(out.size() == a.size() - p + 1);
    for (size_t r = p; r < a.size(); ++r) REQUIRE(out[r - p] == alone({a.begin(), a.begin() + long(r) + 1}));
    REQUIRE(out.back() == alone(b));
  }
}

TEST_CASE("forward: a sliding window's key shift leaves layer 0's cache as a fresh run of the kept tokens writes it",
          "[forward][window]") {
  auto rng = fresh_rng("forward window shift");
  const th_dtype dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0);
  const bool neox = GENERATE(false, true);
  INFO("kv dtype " << quant::dtype_name(dtype) << (neox ? ", NEOX" : ", NORM") << " RoPE");
  ModelSpec spec = model_spec(8, 2, 16, 2);
  spec.info.kv_dtype = dtype;
  auto weights = std::make_shared<ModelWeights>(*make_synthetic_weights(spec, rng()));
  weights->rope.neox = neox;
  const ModelWeights& w = *weights;
  std::vector<int32_t> tokens(40);  // 5 blocks of 8
  for (auto& t : tokens) t = int32_t(rng() % spec.info.vocab_size);
  Engine slid(spec);
  slid.run(w, StepBatch{{StepItem{1, 0, tokens, true, nullptr}}});
  // Blocks 1 and 2 go: positions 24..39 move down to 8..23 and their keys are rotated back by 16.
  const auto& vt = slid.kvcache->vtable<th_kvcache_vtable>();
  th_error err;
  REQUIRE(vt.seq_drop_blocks(slid.kvcache->handle(), 1, 1, 2, &err) == TH_OK);
  shift_cached_keys(w, *slid.kvcache, 1, 8, 24, 16);
  std::vector<int32_t> kept(tokens.begin(), tokens.begin() + 8);
  kept.insert(kept.end(), tokens.begin() + 24, tokens.end());
  Engine fresh(spec);
  fresh.run(w, StepBatch{{StepItem{1, 0, kept, true, nullptr}}});
  const auto [ls, ts] = layout_and_table(slid);
  const auto [lf, tf] = layout_and_table(fresh);
  REQUIRE(ts.size() == 3);
  // Layer 0's keys and values depend on the token and its position only. Values move untouched and
  // sink keys stay: bit for bit. A moved key was rounded to the cache's type where it was, then
  // rotated and rounded again: within two of the type's steps of the fresh key (float's, f16's, or a
  // q8_0 group's scale).
  const uint32_t hd = spec.info.head_dim;
  std::vector<float> a(hd), b(hd);
  size_t moved = 0;
  for (uint32_t p = 0; p < kept.size(); ++p)
    for (uint32_t h = 0; h < spec.info.n_kv_heads; ++h) {
      INFO("position " << p << ", kv head " << h);
      for (bool values : {false, true}) {
        sdk::load_kv_head(*ls, values, 0, ts[p / 8], p % 8, h, a.data());
        sdk::load_kv_head(*lf, values, 0, tf[p / 8], p % 8, h, b.data());
        if (values || p < 8) {
          REQUIRE(a == b);
          continue;
        }
        float top = 0, step = 0;
        for (float x : b) top = std::max(top, std::abs(x));
        if (dtype == TH_DTYPE_F32) step = top * 1e-6f;
        if (dtype == TH_DTYPE_F16) step = top / 1024;
        if (dtype == TH_DTYPE_Q8_0) step = top / 127;  // the largest group's scale
        for (uint32_t d = 0; d < hd; ++d) REQUIRE(std::abs(a[d] - b[d]) <= 2 * step);
        ++moved;
      }
    }
  CHECK(moved == 16 * spec.info.n_kv_heads);
  // A key shifted by the wrong amount (once more: by -32 in all) is far outside that bound.
  shift_cached_keys(w, *slid.kvcache, 1, 8, 24, 16);
  double worst = 0;
  for (uint32_t p = 8; p < kept.size(); ++p) {
    sdk::load_kv_head(*ls, false, 0, ts[p / 8], p % 8, 0, a.data());
    sdk::load_kv_head(*lf, false, 0, tf[p / 8], p % 8, 0, b.data());
    float top = 0;
    for (float x : b) top = std::max(top, std::abs(x));
    for (uint32_t d = 0; d < hd; ++d) worst = std::max(worst, double(std::abs(a[d] - b[d]) / top));
  }
  CHECK(worst > 0.05);
}

}  // namespace cpu_forward_tests
