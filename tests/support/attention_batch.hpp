// Test helpers for attention plugins: random ragged batch shapes, a KV cache (a kvcache plugin
// instance) filled with random keys/values through its layout, with block tables out of order, the
// th_attention_batch over it, and an independent float64 causal attention computed from the logical
// keys/values kept here (never read back from the pool).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kv_cache.hpp"

namespace tokenhost::testing {

// One sequence of a batch: kv_len positions in the cache, its last n_rows positions are query rows
// (n_rows == 1: a decode row; 1 < n_rows < kv_len: a prefill chunk; n_rows == kv_len: a whole prompt).
struct SeqRows {
  uint32_t kv_len;
  uint32_t n_rows;
};

inline uint32_t uniform_u32(std::mt19937_64& rng, uint32_t lo, uint32_t hi) {
  return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
}

// At least 5 sequences in random order: kv_len 1; a decode row over up to max_blocks blocks; a prefill
// chunk over at least 2 blocks; a whole prompt; a decode or chunk over exactly max_blocks full blocks;
// then n_extra random ones.
inline std::vector<SeqRows> random_shapes(std::mt19937_64& rng, uint32_t block_size, uint32_t max_blocks,
                                          uint32_t n_extra = 2) {
  const uint32_t max_len = block_size * max_blocks;
  std::vector<SeqRows> s;
  s.push_back({1, 1});
  s.push_back({uniform_u32(rng, 2, max_len), 1});
  const uint32_t chunk_len = uniform_u32(rng, block_size + 2, max_len);
  s.push_back({chunk_len, uniform_u32(rng, 2, chunk_len - 1)});
  const uint32_t prompt_len = uniform_u32(rng, 2, 2 * block_size);
  s.push_back({prompt_len, prompt_len});
  s.push_back({max_len, uniform_u32(rng, 0, 1) == 0 ? 1 : uniform_u32(rng, 2, max_len)});
  for (uint32_t i = 0; i < n_extra; ++i) {
    const uint32_t len = uniform_u32(rng, 1, max_len);
    s.push_back({len, uniform_u32(rng, 0, 1) == 0 ? 1 : uniform_u32(rng, 1, len)});
  }
  std::shuffle(s.begin(), s.end(), rng);
  return s;
}

// A KV cache holding the sequences of shapes: logical keys/values, the instance, its block tables.
struct FilledKv {
  KvCache cache;
  std::vector<SeqRows> shapes;
  std::vector<std::vector<int32_t>> tables;
  // keys[s][((layer * kv_len + p) * n_kv_heads + h) * head_dim + d]; values alike.
  std::vector<std::vector<float>> keys, values;
  bool tables_out_of_order = false;

  size_t at(size_t s, uint32_t layer, uint32_t p, uint32_t h) const {
    const th_kv_layout& l = *cache.layout;
    return ((size_t(layer) * shapes[s].kv_len + p) * l.n_kv_heads + h) * l.head_dim;
  }
};

// Makes a kv_plugin instance for spec with a pool a little larger than shapes need, shuffles its free
// list (one 1-position filler sequence per block, freed in random order) so that block tables come out
// of order, writes NaN into every slot of the pool and then random keys/values into every position of
// every sequence through the layout. Retries until some multi-block table is out of order.
inline FilledKv fill_kv(const std::string& kv_plugin, const ModelSpec& spec, uint32_t block_size,
                        const std::vector<SeqRows>& shapes, std::mt19937_64& rng) {
  uint32_t need = 0;
  bool multi_block = false;
  for (const SeqRows& s : shapes) {
    need += (s.kv_len + block_size - 1) / block_size;
    multi_block = multi_block || s.kv_len > block_size;
  }
  const uint32_t n_blocks = need + 3;
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int attempt = 0; attempt < 50; ++attempt) {
    FilledKv kv{KvCache(kv_plugin, spec, block_size, n_blocks), shapes, {}, {}, {}, false};
    KvCache& c = kv.cache;
    const th_kv_layout& l = *c.layout;
    const uint64_t filler = uint64_t(1) << 40;
    std::vector<uint64_t> fillers;
    for (uint32_t b = 0; b < n_blocks; ++b) {
      REQUIRE(c.reserve(filler + b, 1, 0) == TH_OK);
      fillers.push_back(filler + b);
    }
    std::shuffle(fillers.begin(), fillers.end(), rng);
    for (uint64_t f : fillers) c.free(f);
    REQUIRE(c.stats().used_blocks == 0);
    const std::vector<float> nan(l.head_dim, std::numeric_limits<float>::quiet_NaN());
    for (uint32_t layer = 0; layer < l.n_layers; ++layer)
      for (uint32_t b = 0; b < l.n_blocks; ++b)
        for (uint32_t t = 0; t < l.block_size; ++t)
          for (uint32_t h = 0; h < l.n_kv_heads; ++h)
            for (void* base : {l.k_base, l.v_base}) kv_store(l, kv_vector(l, base, layer, int32_t(b), t, h), nan.data(), l.head_dim);
    for (size_t s = 0; s < shapes.size(); ++s) {
      REQUIRE(c.reserve(s, shapes[s].kv_len, 0) == TH_OK);
      kv.tables.push_back(c.table(s));
      const std::vector<int32_t>& t = kv.tables.back();
      REQUIRE(t.size() == (shapes[s].kv_len + block_size - 1) / block_size);
      kv.tables_out_of_order = kv.tables_out_of_order || !std::is_sorted(t.begin(), t.end());
      const size_t n = size_t(l.n_layers) * shapes[s].kv_len * l.n_kv_heads * l.head_dim;
      kv.keys.emplace_back(n);
      kv.values.emplace_back(n);
      for (float& x : kv.keys.back()) x = uni(rng);
      for (float& x : kv.values.back()) x = uni(rng);
      round_to_kv(l, kv.keys.back());  // the logical values are what the cache holds
      round_to_kv(l, kv.values.back());
      for (uint32_t layer = 0; layer < l.n_layers; ++layer)
        for (uint32_t p = 0; p < shapes[s].kv_len; ++p)
          for (uint32_t h = 0; h < l.n_kv_heads; ++h) {
            kv_store(l, c.key(t, layer, p, h), &kv.keys[s][kv.at(s, layer, p, h)], l.head_dim);
            kv_store(l, c.value(t, layer, p, h), &kv.values[s][kv.at(s, layer, p, h)], l.head_dim);
          }
    }
    if (kv.tables_out_of_order || !multi_block) return kv;
  }
  FAIL("could not get an out-of-order block table from " << kv_plugin << " in 50 attempts");
  throw std::logic_error("unreachable");
}

// The query side of a batch over a FilledKv: random q rows (row strides padded), positions, tables.
struct AttentionBatch {
  uint32_t layer = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_tokens = 0;
  float scale = 0;
  int64_t q_stride = 0, out_stride = 0;
  std::vector<float> q;
  std::vector<int32_t> positions;
  std::vector<uint32_t> seq_start, kv_len;
  std::vector<const int32_t*> tables;
  const th_kv_layout* kv = nullptr;

  std::vector<float> new_output() const { return std::vector<float>(size_t(n_tokens) * out_stride, -777.0f); }
  const float* q_row(uint32_t i, uint32_t h) const { return q.data() + int64_t(i) * q_stride + int64_t(h) * head_dim; }

  th_attention_batch view(std::vector<float>& out) const {
    th_attention_batch b{};
    b.struct_size = sizeof(th_attention_batch);
    b.layer = layer;
    b.n_tokens = n_tokens;
    b.n_seqs = uint32_t(kv_len.size());
    b.n_heads = n_heads;
    b.n_kv_heads = n_kv_heads;
    b.head_dim = head_dim;
    b.scale = scale;
    b.q = q.data();
    b.q_row_stride = q_stride;
    b.positions = positions.data();
    b.seq_start = seq_start.data();
    b.kv_len = kv_len.data();
    b.block_tables = tables.data();
    b.kv = kv;
    b.out = out.data();
    b.out_row_stride = out_stride;
    return b;
  }
};

inline AttentionBatch make_batch(const FilledKv& kv, uint32_t n_heads, uint32_t layer, std::mt19937_64& rng) {
  const th_kv_layout& l = *kv.cache.layout;
  AttentionBatch b;
  b.layer = layer;
  b.n_heads = n_heads;
  b.n_kv_heads = l.n_kv_heads;
  b.head_dim = l.head_dim;
  b.scale = float(1.0 / std::sqrt(double(l.head_dim)));
  b.q_stride = int64_t(n_heads) * l.head_dim + uniform_u32(rng, 0, 5);
  b.out_stride = int64_t(n_heads) * l.head_dim + uniform_u32(rng, 0, 5);
  b.kv = &l;
  b.seq_start.push_back(0);
  for (size_t s = 0; s < kv.shapes.size(); ++s) {
    const SeqRows& r = kv.shapes[s];
    for (uint32_t i = 0; i < r.n_rows; ++i) b.positions.push_back(int32_t(r.kv_len - r.n_rows + i));
    b.seq_start.push_back(uint32_t(b.positions.size()));
    b.kv_len.push_back(r.kv_len);
    b.tables.push_back(kv.tables[s].data());
  }
  b.n_tokens = uint32_t(b.positions.size());
  b.q.resize(size_t(b.n_tokens) * b.q_stride);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (float& x : b.q) x = uni(rng);
  return b;
}

// Causal attention in float64 with plain loops, from the logical keys/values of kv:
// ref[(i * n_heads + h) * head_dim + d].
inline std::vector<double> reference_attention(const AttentionBatch& b, const FilledKv& kv) {
  const uint32_t d_n = b.head_dim, group = b.n_heads / b.n_kv_heads;
  std::vector<double> ref(size_t(b.n_tokens) * b.n_heads * d_n, 0.0);
  for (size_t s = 0; s + 1 < b.seq_start.size(); ++s) {
    for (uint32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
      const uint32_t n_pos = uint32_t(b.positions[i]) + 1;
      for (uint32_t h = 0; h < b.n_heads; ++h) {
        const uint32_t kvh = h / group;
        const float* q = b.q_row(i, h);
        std::vector<double> w(n_pos);
        for (uint32_t p = 0; p < n_pos; ++p) {
          const float* k = &kv.keys[s][kv.at(s, b.layer, p, kvh)];
          double dot = 0;
          for (uint32_t d = 0; d < d_n; ++d) dot += double(q[d]) * double(k[d]);
          w[p] = double(b.scale) * dot;
        }
        const double mx = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        double* o = &ref[(size_t(i) * b.n_heads + h) * d_n];
        for (uint32_t p = 0; p < n_pos; ++p) {
          const float* v = &kv.values[s][kv.at(s, b.layer, p, kvh)];
          for (uint32_t d = 0; d < d_n; ++d) o[d] += w[p] / sum * double(v[d]);
        }
      }
    }
  }
  return ref;
}

// Relative error of out against ref: the largest, over rows and heads, of
// max_d |out - ref| / max_d |ref|. NaN anywhere (a read of a slot never written) gives +inf.
inline double max_relative_error(const AttentionBatch& b, const std::vector<float>& out,
                                 const std::vector<double>& ref) {
  double worst = 0;
  for (uint32_t i = 0; i < b.n_tokens; ++i) {
    for (uint32_t h = 0; h < b.n_heads; ++h) {
      double diff = 0, mag = 0;
      for (uint32_t d = 0; d < b.head_dim; ++d) {
        const double o = out[size_t(i) * b.out_stride + size_t(h) * b.head_dim + d];
        const double r = ref[(size_t(i) * b.n_heads + h) * b.head_dim + d];
        if (!std::isfinite(o)) return std::numeric_limits<double>::infinity();
        diff = std::max(diff, std::abs(o - r));
        mag = std::max(mag, std::abs(r));
      }
      worst = std::max(worst, mag > 0 ? diff / mag : diff);
    }
  }
  return worst;
}

// out as doubles in reference_attention's packed order (to compare one plugin with another).
inline std::vector<double> packed(const AttentionBatch& b, const std::vector<float>& out) {
  std::vector<double> r(size_t(b.n_tokens) * b.n_heads * b.head_dim);
  for (uint32_t i = 0; i < b.n_tokens; ++i)
    for (uint32_t e = 0; e < b.n_heads * b.head_dim; ++e) r[size_t(i) * b.n_heads * b.head_dim + e] = out[size_t(i) * b.out_stride + e];
  return r;
}

// Head configurations every attention test covers.
struct HeadConfig {
  const char* name;
  uint32_t n_heads, n_kv_heads;
};
inline const std::vector<HeadConfig>& head_configs() {
  static const std::vector<HeadConfig> c = {{"MHA", 4, 4}, {"GQA", 8, 2}, {"GQA", 6, 3}, {"MQA", 4, 1}};
  return c;
}
inline const std::vector<uint32_t>& head_sizes() {
  static const std::vector<uint32_t> s = {8, 16, 64, 128};
  return s;
}

}  // namespace tokenhost::testing
