// attention.matches_reference.<kv dtype>: forward() against float64 attention over the same cache.
// attention.tree.<kv dtype> (plugins built against ABI 1.4 or later): the same with a random tree of
// rows per sequence (th_attention_batch.row_parent): each row sees the positions before its sequence's
// first row in the batch, its ancestors' and its own.
#include <tokenhost/fp16.hpp>
#include <tokenhost/plugin_kv.hpp>

#include <cmath>
#include <cstring>
#include <numeric>

#include "conformance/conformance.hpp"

namespace tokenhost::conformance {
namespace {

// A KV pool the runner owns, in one of two layouts (the plugin must read through the strides):
// [layer][block][kv head][position][element] like kvcache.paged, or [layer][block][position][kv head][element]
// (q8_0, ABI 1.6: the group scales likewise, in pools of their own).
struct Pool {
  th_kv_layout layout{};
  std::vector<char> k, v;
  std::vector<char> k_scales, v_scales;
  // The logical values, as the plugin must read them: value(kv, layer, block, t, h, d).
  float value(const std::vector<char>& pool, uint32_t layer, int32_t block, uint32_t t, uint32_t h, uint32_t d) const {
    const char* at = pool.data() + int64_t(layer) * layout.layer_stride + int64_t(block) * layout.block_stride +
                     int64_t(h) * layout.head_stride + int64_t(t) * layout.token_stride;
    if (layout.dtype == TH_DTYPE_Q8_0) {  // element x its group's scale, the scales read here by hand
      const char* scales = (&pool == &k ? k_scales : v_scales).data() + int64_t(layer) * layout.scale_layer_stride +
                           int64_t(block) * layout.scale_block_stride + int64_t(h) * layout.scale_head_stride +
                           int64_t(t) * layout.scale_token_stride;
      float scale;
      std::memcpy(&scale, scales + sizeof(float) * (d / layout.quant_group), sizeof scale);
      return float(int8_t(at[d])) * scale;
    }
    if (layout.dtype == TH_DTYPE_F16) {
      uint16_t half;
      std::memcpy(&half, at + 2 * size_t(d), 2);
      return sdk::fp16_to_f32(half);
    }
    float f;
    std::memcpy(&f, at + 4 * size_t(d), 4);
    return f;
  }
};

Pool make_pool(Rng& rng, const th_model_info& m, uint32_t block_size, uint32_t n_blocks) {
  Pool p;
  th_kv_layout& l = p.layout;
  const uint32_t bytes = m.kv_dtype == TH_DTYPE_Q8_0 ? 1 : m.kv_dtype == TH_DTYPE_F16 ? 2 : 4;
  l.struct_size = sizeof l;
  l.block_size = block_size;
  l.n_blocks = n_blocks;
  l.n_layers = m.n_layers;
  l.n_kv_heads = m.n_kv_heads;
  l.head_dim = m.head_dim;
  l.dtype = m.kv_dtype;
  const int64_t vector = int64_t(m.head_dim) * bytes;
  const bool heads_outer = uniform(rng, 0, 1) == 0;
  if (heads_outer) {
    l.token_stride = vector;
    l.head_stride = block_size * vector;
  } else {
    l.head_stride = vector;
    l.token_stride = m.n_kv_heads * vector;
  }
  l.block_stride = int64_t(m.n_kv_heads) * block_size * vector;
  l.layer_stride = int64_t(n_blocks) * l.block_stride;
  if (m.kv_dtype == TH_DTYPE_Q8_0) {  // the group scales, in the same order as the elements
    l.quant_group = sdk::kv_q8_group(m.head_dim);
    const int64_t scales = sdk::kv_scale_bytes(m.kv_dtype, m.head_dim, l.quant_group);
    l.scale_token_stride = heads_outer ? scales : m.n_kv_heads * scales;
    l.scale_head_stride = heads_outer ? block_size * scales : scales;
    l.scale_block_stride = int64_t(m.n_kv_heads) * block_size * scales;
    l.scale_layer_stride = int64_t(n_blocks) * l.scale_block_stride;
  }
  l.device = TH_DEVICE_CPU;
  const size_t size = size_t(l.layer_stride) * m.n_layers;
  p.k.resize(size);
  p.v.resize(size);
  if (m.kv_dtype == TH_DTYPE_Q8_0) {  // each head vector drawn as floats and written as q8_0
    const size_t scale_size = size_t(l.scale_layer_stride) * m.n_layers;
    p.k_scales.resize(scale_size);
    p.v_scales.resize(scale_size);
    l.k_scale_base = p.k_scales.data();
    l.v_scale_base = p.v_scales.data();
    std::vector<float> x(m.head_dim);
    for (uint32_t layer = 0; layer < m.n_layers; ++layer)
      for (uint32_t b = 0; b < n_blocks; ++b)
        for (uint32_t t = 0; t < block_size; ++t)
          for (uint32_t h = 0; h < m.n_kv_heads; ++h)
            for (auto [pool, scales] : {std::pair{&p.k, &p.k_scales}, std::pair{&p.v, &p.v_scales}}) {
              for (auto& e : x) e = normal(rng);
              const int64_t at = int64_t(layer) * l.layer_stride + int64_t(b) * l.block_stride + int64_t(h) * l.head_stride +
                                 int64_t(t) * l.token_stride;
              const int64_t s_at = int64_t(layer) * l.scale_layer_stride + int64_t(b) * l.scale_block_stride +
                                   int64_t(h) * l.scale_head_stride + int64_t(t) * l.scale_token_stride;
              sdk::quantize_kv_q8(x.data(), m.head_dim, l.quant_group, reinterpret_cast<int8_t*>(pool->data() + at),
                                  reinterpret_cast<float*>(scales->data() + s_at));
            }
    l.k_base = p.k.data();
    l.v_base = p.v.data();
    return p;
  }
  for (auto* pool : {&p.k, &p.v}) {
    for (size_t at = 0; at < size; at += bytes) {
      const float f = normal(rng);
      if (bytes == 2) {
        const uint16_t h = sdk::f32_to_fp16(f);
        std::memcpy(pool->data() + at, &h, 2);
      } else {
        std::memcpy(pool->data() + at, &f, 4);
      }
    }
  }
  l.k_base = p.k.data();
  l.v_base = p.v.data();
  return p;
}

// One random batch over pool, checked against float64 attention; with `tree`, under a random row_parent.
void check_batch(PluginInstance& inst, Rng& rng, const th_model_info& m, const Pool& pool, bool tree) {
  const uint32_t bs = pool.layout.block_size;
  const uint32_t n_seqs = uniform(rng, 1, 5);
  std::vector<int32_t> free_blocks(pool.layout.n_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);  // tables out of order
  std::vector<std::vector<int32_t>> tables(n_seqs);
  std::vector<uint32_t> kv_len(n_seqs), seq_start{0};
  std::vector<int32_t> positions;
  size_t next_block = 0;
  for (uint32_t s = 0; s < n_seqs; ++s) {
    const uint32_t max_len = uint32_t(std::min<size_t>(40, (free_blocks.size() - next_block) / (n_seqs - s) * bs));
    kv_len[s] = uniform(rng, 1, std::max(1u, max_len));
    const uint32_t rows = uniform(rng, 0, 2) == 0 ? kv_len[s] : uniform(rng, 0, 1) == 0 ? 1 : uniform(rng, 1, kv_len[s]);
    for (uint32_t b = 0; b < (kv_len[s] + bs - 1) / bs; ++b) tables[s].push_back(free_blocks[next_block++]);
    for (uint32_t i = 0; i < rows; ++i) positions.push_back(int32_t(kv_len[s] - rows + i));
    seq_start.push_back(uint32_t(positions.size()));
  }
  const uint32_t n_tokens = uint32_t(positions.size()), hd = m.head_dim, nh = m.n_heads;
  const int64_t q_stride = int64_t(nh) * hd + uniform(rng, 0, 3), out_stride = int64_t(nh) * hd + uniform(rng, 0, 3);
  std::vector<float> q(size_t(n_tokens) * q_stride), out(size_t(n_tokens) * out_stride, std::nanf(""));
  for (auto& x : q) x = normal(rng);
  std::vector<const int32_t*> table_ptrs;
  for (auto& t : tables) table_ptrs.push_back(t.data());
  // A tree: each row's parent an earlier row of its sequence (a chain link half the time) or -1.
  std::vector<int32_t> parent(n_tokens, -1);
  for (uint32_t s = 0; tree && s < n_seqs; ++s)
    for (uint32_t i = seq_start[s] + 1; i < seq_start[s + 1]; ++i)
      if (uniform(rng, 0, 1) == 0) {
        parent[i] = int32_t(i) - 1;
      } else {  // any earlier row of the sequence, or (one below it) none
        const int32_t pick = int32_t(uniform(rng, seq_start[s], i)) - 1;
        parent[i] = pick < int32_t(seq_start[s]) ? -1 : pick;
      }
  const uint32_t layer = uniform(rng, 0, m.n_layers - 1);
  th_attention_batch b{};
  b.struct_size = sizeof b;
  b.layer = layer;
  b.n_tokens = n_tokens;
  b.n_seqs = n_seqs;
  b.n_heads = nh;
  b.n_kv_heads = m.n_kv_heads;
  b.head_dim = hd;
  b.scale = float(1.0 / std::sqrt(double(hd))) * (uniform(rng, 0, 1) ? 1.0f : 0.5f);
  b.q = q.data();
  b.q_row_stride = q_stride;
  b.positions = positions.data();
  b.seq_start = seq_start.data();
  b.kv_len = kv_len.data();
  b.block_tables = table_ptrs.data();
  b.kv = &pool.layout;
  b.out = out.data();
  b.out_row_stride = out_stride;
  b.device = TH_DEVICE_CPU;
  b.row_parent = tree ? parent.data() : nullptr;
  th_error err;
  const th_status st = inst.call(&th_attention_vtable::forward, "forward", inst.handle(), &b, &err);
  expect(st == TH_OK, "forward() returned status " + std::to_string(st) + ": " + err.text());
  const uint32_t group = nh / m.n_kv_heads;
  for (uint32_t s = 0; s < n_seqs; ++s) {
    for (uint32_t i = seq_start[s]; i < seq_start[s + 1]; ++i) {
      // The positions row i sees: causal, or under the tree those before the sequence's first row and
      // the rows on its path to the root.
      std::vector<uint32_t> seen;
      const uint32_t first = seq_start[s];
      for (uint32_t p = 0; p < (tree ? uint32_t(positions[first]) : uint32_t(positions[i]) + 1); ++p) seen.push_back(p);
      if (tree) {
        std::vector<uint32_t> path;
        for (int32_t r = int32_t(i); r >= 0; r = parent[r]) path.push_back(uint32_t(positions[r]));
        seen.insert(seen.end(), path.rbegin(), path.rend());
      }
      const uint32_t n_pos = uint32_t(seen.size());
      for (uint32_t h = 0; h < nh; ++h) {
        const uint32_t kvh = h / group;
        std::vector<double> score(n_pos);
        double max_score = -INFINITY, sum = 0;
        for (uint32_t p = 0; p < n_pos; ++p) {
          double dot = 0;
          for (uint32_t d = 0; d < hd; ++d)
            dot += double(q[size_t(i) * q_stride + h * hd + d]) * pool.value(pool.k, layer, tables[s][seen[p] / bs], seen[p] % bs, kvh, d);
          score[p] = double(b.scale) * dot;
          max_score = std::max(max_score, score[p]);
        }
        for (auto& x : score) sum += x = std::exp(x - max_score);
        for (uint32_t d = 0; d < hd; ++d) {
          double ref = 0;
          for (uint32_t p = 0; p < n_pos; ++p) ref += score[p] * pool.value(pool.v, layer, tables[s][seen[p] / bs], seen[p] % bs, kvh, d);
          ref /= sum;
          const double got = out[size_t(i) * out_stride + h * hd + d];
          expect(std::fabs(got - ref) <= 2e-3 * (1.0 + std::fabs(ref)),
                 "sequence " + std::to_string(s) + " (kv_len " + std::to_string(kv_len[s]) + "), row " + std::to_string(i) +
                     ", head " + std::to_string(h) + ", element " + std::to_string(d) + ": got " + std::to_string(got) +
                     ", float64 attention gives " + std::to_string(ref));
        }
      }
    }
  }
}

}  // namespace

void attention_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  for (const bool tree : {false, true})
  for (th_dtype kv : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0}) {
    const std::string rule = std::string(tree ? "attention.tree." : "attention.matches_reference.") + sdk::dtype_name(kv);
    // GQA, MQA and plain multi-head shapes.
    const ModelSpec shapes[] = {model_shape(4, 2, 16, kv), model_shape(8, 1, 32, kv), model_shape(2, 2, 64, kv)};
    std::string refused;
    std::vector<std::shared_ptr<PluginInstance>> instances;
    for (const auto& m : shapes) {
      std::string why;
      instances.push_back(instance_for(catalog, plugin, m, why));
      if (!instances.back()) refused = why;
    }
    if (std::all_of(instances.begin(), instances.end(), [](const auto& p) { return !p; })) {
      r.not_applicable(rule, "check() refuses it: " + refused);
      continue;
    }
    const PluginInstance& any = **std::find_if(instances.begin(), instances.end(), [](const auto& p) { return p != nullptr; });
    if (tree && any.library().abi_minor() < 4) {
      r.not_applicable(rule, "built against ABI 1." + std::to_string(any.library().abi_minor()) +
                                 ", before row_parent (1.4): the host gives it chains only");
      continue;
    }
    r.rule(rule, [&] {
      for (uint32_t round = 0; round < o.rounds; ++round) {
        const size_t k = round % 3;
        if (!instances[k]) continue;
        const uint32_t bs = std::vector<uint32_t>{1, 4, 16}[uniform(rng, 0, 2)];
        const Pool pool = make_pool(rng, shapes[k].info, bs, 160 / bs + 8);
        check_batch(*instances[k], rng, shapes[k].info, pool, tree);
      }
    });
  }
}

}  // namespace tokenhost::conformance
