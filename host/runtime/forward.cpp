#include "runtime/forward.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "model/quant.hpp"
#include "runtime/matmul.hpp"

namespace tokenhost {
namespace {

// Elementwise f32 view of a vector weight (norms, biases).
const float* f32(const WeightView& w) { return static_cast<const float*>(w.data); }

void rmsnorm(const float* x, const WeightView& weight, float eps, float* out, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  const float* w = f32(weight);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void add_bias(float* y, const WeightView& b, size_t n) {
  if (b.empty()) return;
  for (size_t i = 0; i < n; ++i) y[i] += f32(b)[i];
}

// Rotary position embedding of n_heads vectors of head_dim at position pos.
void rope(float* v, size_t n_heads, size_t head_dim, int32_t pos, const RopeSettings& r) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    double freq = std::pow(double(r.theta), -2.0 * double(i) / double(head_dim));
    double a = double(pos) * double(r.freq_scale) * freq, c = std::cos(a), s = std::sin(a);
    for (size_t h = 0; h < n_heads; ++h) {
      float* x = v + h * head_dim;
      // NORM rotates adjacent pairs (2i, 2i+1); NEOX rotates (i, i + head_dim/2).
      size_t i0 = r.neox ? i : 2 * i, i1 = r.neox ? i + half : 2 * i + 1;
      float x0 = x[i0], x1 = x[i1];
      x[i0] = float(x0 * c - x1 * s);
      x[i1] = float(x0 * s + x1 * c);
    }
  }
}

// out = down(silu(gate x) * up x) for n_rows rows of x ([n_rows][dim] each).
void swiglu(const ExpertWeights& e, const float* x, size_t n_rows, float* out) {
  const size_t ffn = size_t(e.gate.rows);
  std::vector<float> g(n_rows * ffn), u(n_rows * ffn);
  matmul({{e.gate, g.data()}, {e.up, u.data()}}, x, n_rows);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  matmul(e.down, g.data(), n_rows, out);
}

// out += the layer's shared expert on x, each row scaled by sigmoid(gate . x) when the layer has
// that gate. Every token runs it, so it is dense math like the MLP's, on the host's kernels (every
// weight type, the batch's rows at once) rather than routed through the moe plugin.
void add_shared_expert(const LayerWeights& L, const float* x, size_t n_rows, size_t dim, float* out) {
  std::vector<float> shared(n_rows * dim), scale(n_rows, 1.0f);
  swiglu(L.shared_expert, x, n_rows, shared.data());
  if (!L.shared_expert_gate.empty()) {
    matmul(L.shared_expert_gate, x, n_rows, scale.data());
    for (float& s : scale) s = 1.0f / (1.0f + std::exp(-s));
  }
  for (size_t r = 0; r < n_rows; ++r)
    for (size_t i = 0; i < dim; ++i) out[r * dim + i] += scale[r] * shared[r * dim + i];
}

th_tensor tensor_view(const WeightView& w) {
  th_tensor t{};
  t.struct_size = sizeof(th_tensor);
  t.dtype = w.type;
  t.n_dims = 2;
  t.ne[0] = w.cols;
  t.ne[1] = w.rows;
  t.ne[2] = t.ne[3] = 1;
  t.nb[0] = w.type == TH_DTYPE_F32 ? 4 : 0;
  t.nb[1] = int64_t(w.row_bytes);
  t.nb[2] = t.nb[3] = t.nb[1] * w.rows;
  t.data = const_cast<void*>(w.data);
  t.device = TH_DEVICE_CPU;
  return t;
}

[[noreturn]] void plugin_failed(const PluginInstance& p, const char* call, th_status s, const th_error& err) {
  std::string message = p.id() + " " + call + " failed with " + status_name(s) + ": " + err.text();
  if (s == TH_ERR_RESOURCE_EXHAUSTED) throw KvExhausted(message);
  throw std::runtime_error(message);
}

// Adds the time of its scope to *total (when total is set).
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* total) : total_(total) {
    if (total_) start_ = std::chrono::steady_clock::now();
  }
  ~ScopedSeconds() {
    if (total_) *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

std::vector<std::vector<float>> forward_step(const ModelWeights& w, const StepBatch& batch, const StepPlugins& plugins) {
  const auto& info = w.spec.info;
  const size_t dim = info.dim, hd = info.head_dim, nh = info.n_heads, nkv = info.n_kv_heads;
  const auto& kv_vt = plugins.kvcache->vtable<th_kvcache_vtable>();
  const auto& at_vt = plugins.attention->vtable<th_attention_vtable>();
  th_instance* kv_inst = plugins.kvcache->handle();
  th_error err;
  double* kv_seconds = plugins.seconds ? &plugins.seconds->kvcache : nullptr;
  double* attention_seconds = plugins.seconds ? &plugins.seconds->attention : nullptr;
  double* moe_seconds = plugins.seconds ? &plugins.seconds->moe : nullptr;
  std::optional<ScopedSeconds> kv_timer(std::in_place, kv_seconds);  // the layout and block tables

  const th_kv_layout* layout = nullptr;
  if (th_status s = kv_vt.get_layout(kv_inst, &layout, &err)) plugin_failed(*plugins.kvcache, "get_layout", s, err);
  if (layout->dtype != TH_DTYPE_F32) throw std::runtime_error("the CPU runtime writes f32 KV caches only");

  // Rows of the batch: every token of every item, in order.
  std::vector<uint32_t> seq_start = {0}, kv_len;
  std::vector<int32_t> positions, tokens;
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
  // seq_blocks pointers are valid until the next call on the kvcache: copy each table.
  std::vector<std::vector<int32_t>> table_copies;
  for (const auto& item : batch.items) {
    const int32_t* blocks = nullptr;
    uint32_t n = 0;
    if (th_status s = kv_vt.seq_blocks(kv_inst, item.seq_id, &blocks, &n, &err))
      plugin_failed(*plugins.kvcache, "seq_blocks", s, err);
    table_copies.emplace_back(blocks, blocks + n);
  }
  kv_timer.reset();
  std::vector<const int32_t*> tables;
  for (const auto& t : table_copies) tables.push_back(t.data());
  std::vector<size_t> row_seq;
  for (size_t s = 0; s < batch.items.size(); ++s)
    for (uint32_t r = seq_start[s]; r < seq_start[s + 1]; ++r) row_seq.push_back(s);

  const size_t n_rows = tokens.size();
  const size_t qdim = nh * hd, kvdim = nkv * hd;
  std::vector<float> x(n_rows * dim), xn(n_rows * dim), q(n_rows * qdim), k(n_rows * kvdim), v(n_rows * kvdim),
      att(n_rows * qdim), tmp(n_rows * dim), ffn_out(n_rows * dim);
  for (size_t r = 0; r < n_rows; ++r) {
    int32_t tok = tokens[r];
    if (tok < 0 || uint32_t(tok) >= info.vocab_size)
      throw std::runtime_error("token id " + std::to_string(tok) + " is outside the vocabulary");
    quant::dequantize_row(w.embed.type, w.embed.row(tok), &x[r * dim], int64_t(dim));
  }

  for (uint32_t l = 0; l < info.n_layers; ++l) {
    const auto& L = w.layers[l];
    for (size_t r = 0; r < n_rows; ++r) rmsnorm(&x[r * dim], L.attn_norm, w.rms_eps, &xn[r * dim], dim);
    matmul({{L.wq, q.data()}, {L.wk, k.data()}, {L.wv, v.data()}}, xn.data(), n_rows);
    for (size_t r = 0; r < n_rows; ++r) {
      float *qr = &q[r * qdim], *kr = &k[r * kvdim], *vr = &v[r * kvdim];
      add_bias(qr, L.bq, qdim);
      add_bias(kr, L.bk, kvdim);
      add_bias(vr, L.bv, kvdim);
      rope(qr, nh, hd, positions[r], w.rope);
      rope(kr, nkv, hd, positions[r], w.rope);
      // Store this row's keys and values through the published layout.
      uint32_t pos = uint32_t(positions[r]);
      int32_t block = tables[row_seq[r]][pos / layout->block_size];
      uint32_t slot = pos % layout->block_size;
      for (size_t h = 0; h < nkv; ++h) {
        int64_t off = int64_t(l) * layout->layer_stride + int64_t(block) * layout->block_stride +
                      int64_t(h) * layout->head_stride + int64_t(slot) * layout->token_stride;
        std::memcpy(static_cast<char*>(layout->k_base) + off, kr + h * hd, hd * sizeof(float));
        std::memcpy(static_cast<char*>(layout->v_base) + off, vr + h * hd, hd * sizeof(float));
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
    ab.q_row_stride = int64_t(qdim);
    ab.positions = positions.data();
    ab.seq_start = seq_start.data();
    ab.kv_len = kv_len.data();
    ab.block_tables = tables.data();
    ab.kv = layout;
    ab.out = att.data();
    ab.out_row_stride = int64_t(qdim);
    {
      ScopedSeconds timer(attention_seconds);
      if (th_status s = at_vt.forward(plugins.attention->handle(), &ab, &err)) plugin_failed(*plugins.attention, "forward", s, err);
    }

    matmul(L.wo, att.data(), n_rows, tmp.data());
    for (size_t i = 0; i < n_rows * dim; ++i) x[i] += tmp[i];
    for (size_t r = 0; r < n_rows; ++r) rmsnorm(&x[r * dim], L.ffn_norm, w.rms_eps, &xn[r * dim], dim);
    if (info.n_experts == 0) {
      swiglu(L.experts[0], xn.data(), n_rows, ffn_out.data());
    } else {
      const auto& moe_vt = plugins.moe->vtable<th_moe_vtable>();
      const uint32_t ne = info.n_experts, kk = info.n_experts_used;
      std::vector<float> logits(n_rows * ne), weights(n_rows * kk);
      std::vector<int32_t> ids(n_rows * kk);
      matmul(L.router, xn.data(), n_rows, logits.data());
      ScopedSeconds timer(moe_seconds);  // gating and experts (the experts' products run inside the plugin)
      th_moe_gate_args ga{sizeof ga, l, uint32_t(n_rows), ne, kk, logits.data(), ids.data(), weights.data()};
      if (th_status s = moe_vt.gate(plugins.moe->handle(), &ga, &err)) plugin_failed(*plugins.moe, "gate", s, err);
      std::vector<th_moe_expert_weights> experts;
      for (const auto& e : L.experts) experts.push_back({tensor_view(e.gate), tensor_view(e.up), tensor_view(e.down)});
      th_moe_experts_args ea{sizeof ea, l, uint32_t(n_rows), uint32_t(dim), info.ffn_dim, ne, kk, xn.data(),
                             ids.data(), weights.data(), experts.data(), nullptr, ffn_out.data()};
      if (th_status s = moe_vt.experts(plugins.moe->handle(), &ea, &err)) plugin_failed(*plugins.moe, "experts", s, err);
    }
    if (!L.shared_expert.empty()) add_shared_expert(L, xn.data(), n_rows, dim, ffn_out.data());
    for (size_t i = 0; i < n_rows * dim; ++i) x[i] += ffn_out[i];
  }

  // Logits of the last row of each sampled item, in one product.
  std::vector<size_t> sampled_rows;
  for (size_t s = 0; s < batch.items.size(); ++s)
    if (batch.items[s].sample) sampled_rows.push_back(seq_start[s + 1] - 1);
  std::vector<float> finals(sampled_rows.size() * dim), all(sampled_rows.size() * size_t(info.vocab_size));
  for (size_t i = 0; i < sampled_rows.size(); ++i) rmsnorm(&x[sampled_rows[i] * dim], w.out_norm, w.rms_eps, &finals[i * dim], dim);
  matmul(w.output, finals.data(), sampled_rows.size(), all.data());
  std::vector<std::vector<float>> logits;
  for (size_t i = 0; i < sampled_rows.size(); ++i)
    logits.emplace_back(all.begin() + long(i * info.vocab_size), all.begin() + long((i + 1) * info.vocab_size));
  return logits;
}

}  // namespace tokenhost
