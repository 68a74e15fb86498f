// Both attention plugins over an 8-bit KV cache (q8_0, ABI 1.6) laid out by kvcache.paged and written
// as the host writes it: against float64 attention over the keys and values before quantization, within
// the bound the format gives, on fresh random inputs; and the q8_0 layout's memory against f16's.
#include <catch2/catch.hpp>

#include <tokenhost/plugin_kv.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kv_cache.hpp"

namespace attention_q8_0_kv_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
namespace sdk = tokenhost::sdk;

namespace {

// The bound on one (row, head) output element, from the format: a q8_0 element is off by at most half
// its group's step (scale / 2, scale = max |x| / 127). Scores move by at most
//   delta = attention scale x sum over d of |q_d| x (key step of d's group) / 2
// for every position, so each softmax weight moves by a factor within [e^-2delta, e^2delta], and
//   |out - out_float64| <= (value step) / 2 + (e^(2 delta) - 1) x max |v|
// (the first term: the weighted mean of the values' own errors; the second: the weights' change).
struct Bound {
  double key_half_step = 0, value_half_step = 0, max_abs_value = 0;
};

}  // namespace

TEST_CASE("q8_0 KV: both attention plugins stay within the format's bound of float64 attention over unquantized keys and values",
          "[attention][q8_0]") {
  auto rng = fresh_rng("q8_0 kv attention");
  std::map<std::string, double> worst_of;  // per plugin and level: the largest error of any trial, as a share of its bound
  for (int trial = 0; trial < 12; ++trial) {
    const uint32_t head_dim = std::vector<uint32_t>{8, 16, 32, 64}[trial % 4], n_kv = 1 + trial % 2, n_heads = n_kv * (1 + trial % 3);
    const uint32_t bs = trial % 3 == 0 ? 4 : 16, n_layers = 2;
    ModelSpec spec = model_spec(n_heads, n_kv, head_dim, n_layers);
    spec.info.kv_dtype = TH_DTYPE_Q8_0;
    // Sequences: a decode row, a prefill chunk, a whole prompt.
    const std::vector<std::pair<uint32_t, uint32_t>> seqs = {
        {std::uniform_int_distribution<uint32_t>(1, 70)(rng), 1},
        {std::uniform_int_distribution<uint32_t>(20, 90)(rng), 7},
        {std::uniform_int_distribution<uint32_t>(1, 30)(rng), 0}};  // 0: every position a row
    uint32_t blocks = 0;
    for (auto [len, rows] : seqs) blocks += (len + bs - 1) / bs;
    KvCache cache("kvcache.paged", spec, bs, blocks + 2);
    const th_kv_layout& l = *cache.layout;
    REQUIRE(l.dtype == TH_DTYPE_Q8_0);
    REQUIRE(l.quant_group == sdk::kv_q8_group(head_dim));
    REQUIRE(head_dim % l.quant_group == 0);
    // Keys and values as floats (some heads scaled up: groups with different ranges), written as q8_0.
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> keys, values;  // [s][((layer * len + p) * n_kv + h) * head_dim + d]
    std::vector<std::vector<int32_t>> tables;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const uint32_t len = seqs[s].first;
      REQUIRE(cache.reserve(s, len, 0) == TH_OK);
      tables.push_back(cache.table(s));
      keys.emplace_back(size_t(n_layers) * len * n_kv * head_dim);
      values.emplace_back(keys.back().size());
      for (size_t i = 0; i < keys.back().size(); ++i) {
        const float range = 1.0f + 4.0f * float((i / l.quant_group) % 3);
        keys.back()[i] = range * normal(rng);
        values.back()[i] = range * normal(rng);
      }
      for (uint32_t layer = 0; layer < n_layers; ++layer)
        for (uint32_t p = 0; p < len; ++p)
          for (uint32_t h = 0; h < n_kv; ++h) {
            const size_t at = ((size_t(layer) * len + p) * n_kv + h) * head_dim;
            const int32_t block = tables[s][p / bs];
            for (auto [x, base, scales] : {std::tuple{&keys[s], l.k_base, l.k_scale_base}, std::tuple{&values[s], l.v_base, l.v_scale_base}})
              sdk::quantize_kv_q8(x->data() + at, head_dim, l.quant_group,
                                  reinterpret_cast<int8_t*>(const_cast<char*>(sdk::kv_head_bytes(l, base, layer, block, p % bs, h))),
                                  const_cast<float*>(sdk::kv_head_scales(l, scales, layer, block, p % bs, h)));
          }
    }
    // The batch: each sequence's last rows.
    const uint32_t layer = uint32_t(trial % n_layers);
    std::vector<int32_t> positions;
    std::vector<uint32_t> seq_start = {0}, kv_len;
    std::vector<const int32_t*> table_ptrs;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const uint32_t len = seqs[s].first, rows = seqs[s].second == 0 ? len : std::min(seqs[s].second, len);
      for (uint32_t i = 0; i < rows; ++i) positions.push_back(int32_t(len - rows + i));
      seq_start.push_back(uint32_t(positions.size()));
      kv_len.push_back(len);
      table_ptrs.push_back(tables[s].data());
    }
    const uint32_t n_tokens = uint32_t(positions.size());
    std::vector<float> q(size_t(n_tokens) * n_heads * head_dim);
    for (float& x : q) x = normal(rng);
    th_attention_batch b{};
    b.struct_size = sizeof b;
    b.layer = layer;
    b.n_tokens = n_tokens;
    b.n_seqs = uint32_t(seqs.size());
    b.n_heads = n_heads;
    b.n_kv_heads = n_kv;
    b.head_dim = head_dim;
    b.scale = float(1.0 / std::sqrt(double(head_dim)));
    b.q = q.data();
    b.q_row_stride = int64_t(n_heads) * head_dim;
    b.positions = positions.data();
    b.seq_start = seq_start.data();
    b.kv_len = kv_len.data();
    b.block_tables = table_ptrs.data();
    b.kv = &l;
    b.out_row_stride = b.q_row_stride;
    // cpu_flash at each kernel level (its tiles are dequantized by the level's own code), the reference.
    for (const auto& [plugin, level] : {std::pair{"attention.cpu_flash", "portable"}, std::pair{"attention.cpu_flash", "auto"},
                                        std::pair{"attention.reference", ""}}) {
      auto attn = *level ? make_plugin(plugin, spec, toml::table{{"kernels", level}}) : make_plugin(plugin, spec);
      std::vector<float> out(q.size(), NAN);
      b.out = out.data();
      th_error err;
      REQUIRE(attn->vtable<th_attention_vtable>().forward(attn->handle(), &b, &err) == TH_OK);
      double worst = 0;  // the largest error as a share of its bound
      for (size_t s = 0; s < seqs.size(); ++s) {
        const uint32_t len = seqs[s].first;
        for (uint32_t i = seq_start[s]; i < seq_start[s + 1]; ++i) {
          const uint32_t n_pos = uint32_t(positions[i]) + 1;
          for (uint32_t h = 0; h < n_heads; ++h) {
            const uint32_t kvh = h / (n_heads / n_kv);
            const float* qr = q.data() + (size_t(i) * n_heads + h) * head_dim;
            std::vector<double> w(n_pos);
            Bound bound;
            double delta = 0;
            for (uint32_t p = 0; p < n_pos; ++p) {
              const float* k = &keys[s][((size_t(layer) * len + p) * n_kv + kvh) * head_dim];
              const float* v = &values[s][((size_t(layer) * len + p) * n_kv + kvh) * head_dim];
              double dot = 0, shift = 0;
              for (uint32_t g = 0; g < head_dim / l.quant_group; ++g) {
                double kmax = 0, vmax = 0;
                for (uint32_t e = g * l.quant_group; e < (g + 1) * l.quant_group; ++e) {
                  kmax = std::max(kmax, std::fabs(double(k[e])));
                  vmax = std::max(vmax, std::fabs(double(v[e])));
                  bound.max_abs_value = std::max(bound.max_abs_value, std::fabs(double(v[e])));
                }
                for (uint32_t e = g * l.quant_group; e < (g + 1) * l.quant_group; ++e) shift += std::fabs(double(qr[e])) * kmax / 254.0;
                bound.value_half_step = std::max(bound.value_half_step, vmax / 254.0);
              }
              for (uint32_t e = 0; e < head_dim; ++e) dot += double(qr[e]) * double(k[e]);
              w[p] = double(b.scale) * dot;
              delta = std::max(delta, double(b.scale) * shift);
            }
            const double mx = *std::max_element(w.begin(), w.end());
            double sum = 0;
            for (double& x : w) sum += (x = std::exp(x - mx));
            const double allowed = bound.value_half_step + std::expm1(2 * delta) * bound.max_abs_value + 1e-5;
            for (uint32_t e = 0; e < head_dim; ++e) {
              double ref = 0;
              for (uint32_t p = 0; p < n_pos; ++p) ref += w[p] / sum * double(values[s][((size_t(layer) * len + p) * n_kv + kvh) * head_dim + e]);
              const double got = out[(size_t(i) * n_heads + h) * head_dim + e];
              INFO(plugin << " " << level << ", trial " << trial << ", head_dim " << head_dim << ", row " << i << ", head " << h << ", element " << e
                          << ": got " << got << ", float64 " << ref << ", bound " << allowed);
              REQUIRE(std::fabs(got - ref) <= allowed);
              worst = std::max(worst, std::fabs(got - ref) / allowed);
            }
          }
        }
      }
      double& most = worst_of[std::string(plugin) + " " + level];
      most = std::max(most, worst);
    }
  }
  // The bound is not loose to the point of meaning nothing: errors reach a fair share of it (over the
  // trials: one trial alone drew 0.0049 in a run of the suite).
  for (const auto& [which, most] : worst_of) {
    INFO(which << ": largest error " << most << " of its bound");
    CHECK(most > 0.005);
  }
}

TEST_CASE("q8_0 KV: kvcache.paged lays out int8 elements and group scales in less memory than f16, and copies both on write",
          "[kvcache][q8_0]") {
  auto rng = fresh_rng("q8_0 kv layout");
  // Bytes a block takes: elements and scales; f16 against q8_0 (1.33x for heads of 8, 1.78x of 64).
  for (auto [head_dim, ratio] : {std::pair{8u, 16.0 / 12.0}, std::pair{64u, 128.0 / 72.0}, std::pair{16u, 32.0 / 20.0}}) {
    ModelSpec f16 = model_spec(4, 2, head_dim), q8 = f16;
    f16.info.kv_dtype = TH_DTYPE_F16;
    q8.info.kv_dtype = TH_DTYPE_Q8_0;
    KvCache a("kvcache.paged", f16, 16, 8), b("kvcache.paged", q8, 16, 8);
    const double fb = double(a.layout->block_stride);
    const double qb = double(b.layout->block_stride + b.layout->scale_block_stride);
    INFO("head_dim " << head_dim << ": f16 " << fb << " bytes a block, q8_0 " << qb);
    CHECK(fb / qb == Approx(ratio));
    CHECK(b.layout->quant_group == std::min(32u, head_dim));
    CHECK(b.layout->k_scale_base != nullptr);
    CHECK(a.layout->k_scale_base == nullptr);
  }
  // A forked sequence's shared block is copied with its scales when the child writes into it.
  ModelSpec q8 = model_spec(2, 2, 32);
  q8.info.kv_dtype = TH_DTYPE_Q8_0;
  KvCache c("kvcache.paged", q8, 8, 8);
  const th_kv_layout& l = *c.layout;
  REQUIRE(c.reserve(1, 6, 0) == TH_OK);
  std::vector<float> x(32);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& e : x) e = normal(rng);
  const int32_t parent_block = c.table(1)[0];
  sdk::quantize_kv_q8(x.data(), 32, l.quant_group, reinterpret_cast<int8_t*>(const_cast<char*>(sdk::kv_head_bytes(l, l.k_base, 1, parent_block, 3, 1))),
                      const_cast<float*>(sdk::kv_head_scales(l, l.k_scale_base, 1, parent_block, 3, 1)));
  std::vector<float> want(32), got(32);
  sdk::load_kv_head(l, false, 1, parent_block, 3, 1, want.data());
  float amax = 0;
  for (float e : x) amax = std::max(amax, std::fabs(e));
  for (uint32_t e = 0; e < 32; ++e) CHECK(std::fabs(want[e] - x[e]) <= amax / 254.0f + 1e-6f);  // half a step
  REQUIRE(c.fork(1, 2) == TH_OK);
  REQUIRE(c.reserve(2, 7, 6) == TH_OK);  // writes position 6 of the shared block: copied first
  const int32_t child_block = c.table(2)[0];
  REQUIRE(child_block != parent_block);
  sdk::load_kv_head(l, false, 1, child_block, 3, 1, got.data());
  CHECK(got == want);
}

}  // namespace attention_q8_0_kv_tests
