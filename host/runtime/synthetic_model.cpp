#include "runtime/synthetic_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

namespace tokenhost {
namespace {

std::vector<float> random_matrix(std::mt19937_64& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> norm_weights(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> dist(0.8f, 1.2f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// y[rows] = W[rows][cols] x[cols]
void matvec(const float* w, const float* x, float* y, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float acc = 0;
    for (size_t c = 0; c < cols; ++c) acc += row[c] * x[c];
    y[r] = acc;
  }
}

void rmsnorm(const float* x, const float* weight, float* out, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  float scale = float(1.0 / std::sqrt(ss / double(n) + 1e-5));
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// Rotary position embedding, normal (interleaved pairs) layout, theta 10000.
void rope(float* v, size_t n_heads, size_t head_dim, int32_t pos) {
  for (size_t h = 0; h < n_heads; ++h) {
    float* x = v + h * head_dim;
    for (size_t i = 0; i + 1 < head_dim; i += 2) {
      double freq = std::pow(10000.0, -double(i) / double(head_dim));
      double a = pos * freq, c = std::cos(a), s = std::sin(a);
      float x0 = x[i], x1 = x[i + 1];
      x[i] = float(x0 * c - x1 * s);
      x[i + 1] = float(x0 * s + x1 * c);
    }
  }
}

void swiglu(const SyntheticWeights::Expert& e, const float* x, float* out, size_t dim, size_t ffn) {
  std::vector<float> g(ffn), u(ffn);
  matvec(e.gate.data(), x, g.data(), ffn, dim);
  matvec(e.up.data(), x, u.data(), ffn, dim);
  for (size_t i = 0; i < ffn; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  matvec(e.down.data(), g.data(), out, dim, ffn);
}

th_tensor matrix_view(const std::vector<float>& m, size_t rows, size_t cols) {
  th_tensor t{};
  t.struct_size = sizeof(th_tensor);
  t.dtype = TH_DTYPE_F32;
  t.n_dims = 2;
  t.ne[0] = int64_t(cols);
  t.ne[1] = int64_t(rows);
  t.ne[2] = t.ne[3] = 1;
  t.nb[0] = 4;
  t.nb[1] = int64_t(cols * 4);
  t.nb[2] = t.nb[3] = t.nb[1] * int64_t(rows);
  t.data = const_cast<float*>(m.data());
  t.device = TH_DEVICE_CPU;
  return t;
}

[[noreturn]] void plugin_failed(const PluginInstance& p, const char* call, th_status s, const th_error& err) {
  std::string message = p.id() + " " + call + " failed with " + status_name(s) + ": " + err.text();
  if (s == TH_ERR_RESOURCE_EXHAUSTED) throw KvExhausted(message);
  throw std::runtime_error(message);
}

}  // namespace

size_t SyntheticWeights::bytes() const {
  size_t n = embed.size() + out_norm.size() + output.size();
  for (const auto& l : layers) {
    n += l.attn_norm.size() + l.ffn_norm.size() + l.wq.size() + l.wk.size() + l.wv.size() + l.wo.size() + l.router.size();
    for (const auto& e : l.experts) n += e.gate.size() + e.up.size() + e.down.size();
  }
  return n * sizeof(float);
}

std::shared_ptr<const SyntheticWeights> make_synthetic_weights(const ModelSpec& spec, uint64_t seed) {
  auto w = std::make_shared<SyntheticWeights>();
  w->spec = spec;
  const auto& i = spec.info;
  std::mt19937_64 rng(seed);
  size_t kv = size_t(i.n_kv_heads) * i.head_dim;
  w->embed = random_matrix(rng, size_t(i.vocab_size) * i.dim, 1.0f);
  w->out_norm = norm_weights(rng, i.dim);
  w->output = random_matrix(rng, size_t(i.vocab_size) * i.dim, 0.05f);
  for (uint32_t l = 0; l < i.n_layers; ++l) {
    SyntheticWeights::Layer layer;
    float s = 1.0f / std::sqrt(float(i.dim));
    layer.attn_norm = norm_weights(rng, i.dim);
    layer.ffn_norm = norm_weights(rng, i.dim);
    layer.wq = random_matrix(rng, size_t(i.dim) * i.dim, s);
    layer.wk = random_matrix(rng, kv * i.dim, s);
    layer.wv = random_matrix(rng, kv * i.dim, s);
    layer.wo = random_matrix(rng, size_t(i.dim) * i.dim, s);
    uint32_t n_experts = i.n_experts > 0 ? i.n_experts : 1;
    if (i.n_experts > 0) layer.router = random_matrix(rng, size_t(i.n_experts) * i.dim, s);
    for (uint32_t e = 0; e < n_experts; ++e) {
      SyntheticWeights::Expert ex;
      ex.gate = random_matrix(rng, size_t(i.ffn_dim) * i.dim, s);
      ex.up = random_matrix(rng, size_t(i.ffn_dim) * i.dim, s);
      ex.down = random_matrix(rng, size_t(i.dim) * i.ffn_dim, 1.0f / std::sqrt(float(i.ffn_dim)));
      layer.experts.push_back(std::move(ex));
    }
    w->layers.push_back(std::move(layer));
  }
  return w;
}

StepResult run_synthetic_step(const SyntheticWeights& w, const StepBatch& batch, const StepPlugins& plugins) {
  auto started = std::chrono::steady_clock::now();
  const auto& info = w.spec.info;
  const size_t dim = info.dim, hd = info.head_dim, nh = info.n_heads, nkv = info.n_kv_heads;
  const auto& kv_vt = plugins.kvcache->vtable<th_kvcache_vtable>();
  const auto& at_vt = plugins.attention->vtable<th_attention_vtable>();
  th_instance* kv_inst = plugins.kvcache->handle();
  th_error err;

  const th_kv_layout* layout = nullptr;
  if (th_status s = kv_vt.get_layout(kv_inst, &layout, &err)) plugin_failed(*plugins.kvcache, "get_layout", s, err);
  if (layout->dtype != TH_DTYPE_F32) throw std::runtime_error("the synthetic model writes f32 KV caches only");

  // Rows of the batch: every token of every item, in order.
  std::vector<uint32_t> seq_start = {0}, kv_len;
  std::vector<int32_t> positions, tokens;
  std::vector<const int32_t*> tables;
  std::vector<std::vector<int32_t>> table_copies;  // seq_blocks pointers are valid until the next call
  for (const auto& item : batch.items) {
    uint32_t end = item.start + uint32_t(item.tokens.size());
    if (th_status s = kv_vt.seq_reserve(kv_inst, item.seq_id, end, item.start, &err))
      plugin_failed(*plugins.kvcache, "seq_reserve", s, err);
    for (uint32_t t = 0; t < item.tokens.size(); ++t) {
      positions.push_back(int32_t(item.start + t));
      tokens.push_back(item.tokens[t]);
    }
    seq_start.push_back(uint32_t(tokens.size()));
    kv_len.push_back(end);
  }
  for (const auto& item : batch.items) {
    const int32_t* blocks = nullptr;
    uint32_t n = 0;
    if (th_status s = kv_vt.seq_blocks(kv_inst, item.seq_id, &blocks, &n, &err))
      plugin_failed(*plugins.kvcache, "seq_blocks", s, err);
    table_copies.emplace_back(blocks, blocks + n);
  }
  for (const auto& t : table_copies) tables.push_back(t.data());
  std::vector<uint64_t> row_seq;
  for (size_t s = 0; s < batch.items.size(); ++s)
    for (uint32_t r = seq_start[s]; r < seq_start[s + 1]; ++r) row_seq.push_back(s);

  const size_t n_rows = tokens.size();
  std::vector<float> x(n_rows * dim), xn(dim), q(n_rows * dim), att(n_rows * dim), tmp(dim), k(nkv * hd), v(nkv * hd);
  for (size_t r = 0; r < n_rows; ++r) {
    int32_t tok = tokens[r];
    if (tok < 0 || uint32_t(tok) >= info.vocab_size) throw std::runtime_error("token id " + std::to_string(tok) + " is outside the vocabulary");
    std::memcpy(&x[r * dim], &w.embed[size_t(tok) * dim], dim * sizeof(float));
  }

  for (uint32_t l = 0; l < info.n_layers; ++l) {
    const auto& L = w.layers[l];
    for (size_t r = 0; r < n_rows; ++r) {
      rmsnorm(&x[r * dim], L.attn_norm.data(), xn.data(), dim);
      matvec(L.wq.data(), xn.data(), &q[r * dim], dim, dim);
      matvec(L.wk.data(), xn.data(), k.data(), nkv * hd, dim);
      matvec(L.wv.data(), xn.data(), v.data(), nkv * hd, dim);
      rope(&q[r * dim], nh, hd, positions[r]);
      rope(k.data(), nkv, hd, positions[r]);
      // Store this row's keys and values through the published layout.
      uint32_t pos = uint32_t(positions[r]);
      int32_t block = tables[row_seq[r]][pos / layout->block_size];
      uint32_t slot = pos % layout->block_size;
      for (size_t h = 0; h < nkv; ++h) {
        int64_t off = int64_t(l) * layout->layer_stride + int64_t(block) * layout->block_stride +
                      int64_t(h) * layout->head_stride + int64_t(slot) * layout->token_stride;
        std::memcpy(static_cast<char*>(layout->k_base) + off, &k[h * hd], hd * sizeof(float));
        std::memcpy(static_cast<char*>(layout->v_base) + off, &v[h * hd], hd * sizeof(float));
      }
    }
    th_attention_batch ab{};
    ab.struct_size = sizeof ab;
    ab.layer = l;
    ab.n_tokens = uint32_t(n_rows);
    ab.n_seqs = uint32_t(batch.items.size());
    ab.n_heads = uint32_t(nh);
    ab.n_kv_heads = uint32_t(nkv);
    ab.head_dim = uint32_t(hd);
    ab.scale = float(1.0 / std::sqrt(double(hd)));
    ab.q = q.data();
    ab.q_row_stride = int64_t(dim);
    ab.positions = positions.data();
    ab.seq_start = seq_start.data();
    ab.kv_len = kv_len.data();
    ab.block_tables = tables.data();
    ab.kv = layout;
    ab.out = att.data();
    ab.out_row_stride = int64_t(dim);
    if (th_status s = at_vt.forward(plugins.attention->handle(), &ab, &err)) plugin_failed(*plugins.attention, "forward", s, err);

    std::vector<float> normed(n_rows * dim), ffn_out(n_rows * dim);
    for (size_t r = 0; r < n_rows; ++r) {
      matvec(L.wo.data(), &att[r * dim], tmp.data(), dim, dim);
      for (size_t i = 0; i < dim; ++i) x[r * dim + i] += tmp[i];
      rmsnorm(&x[r * dim], L.ffn_norm.data(), &normed[r * dim], dim);
    }
    if (info.n_experts == 0) {
      for (size_t r = 0; r < n_rows; ++r) swiglu(L.experts[0], &normed[r * dim], &ffn_out[r * dim], dim, info.ffn_dim);
    } else {
      const auto& moe_vt = plugins.moe->vtable<th_moe_vtable>();
      const uint32_t ne = info.n_experts, kk = info.n_experts_used;
      std::vector<float> logits(n_rows * ne), weights(n_rows * kk);
      std::vector<int32_t> ids(n_rows * kk);
      for (size_t r = 0; r < n_rows; ++r) matvec(L.router.data(), &normed[r * dim], &logits[r * ne], ne, dim);
      th_moe_gate_args g{sizeof g, l, uint32_t(n_rows), ne, kk, logits.data(), ids.data(), weights.data()};
      if (th_status s = moe_vt.gate(plugins.moe->handle(), &g, &err)) plugin_failed(*plugins.moe, "gate", s, err);
      std::vector<th_moe_expert_weights> experts;
      for (const auto& e : L.experts) {
        experts.push_back({matrix_view(e.gate, info.ffn_dim, dim), matrix_view(e.up, info.ffn_dim, dim),
                           matrix_view(e.down, dim, info.ffn_dim)});
      }
      th_moe_experts_args a{sizeof a, l, uint32_t(n_rows), uint32_t(dim), info.ffn_dim, ne, kk, normed.data(),
                            ids.data(), weights.data(), experts.data(), nullptr, ffn_out.data()};
      if (th_status s = moe_vt.experts(plugins.moe->handle(), &a, &err)) plugin_failed(*plugins.moe, "experts", s, err);
    }
    for (size_t i = 0; i < n_rows * dim; ++i) x[i] += ffn_out[i];
  }

  StepResult result;
  std::vector<float> logits(info.vocab_size);
  for (size_t s = 0; s < batch.items.size(); ++s) {
    if (!batch.items[s].sample) continue;
    size_t r = seq_start[s + 1] - 1;
    rmsnorm(&x[r * dim], w.out_norm.data(), xn.data(), dim);
    matvec(w.output.data(), xn.data(), logits.data(), info.vocab_size, dim);
    result.sampled.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace tokenhost
