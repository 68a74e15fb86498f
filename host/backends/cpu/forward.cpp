#include "backends/cpu/forward.hpp"

#include <tokenhost/plugin_kv.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "model/quant.hpp"
#include "base/compute_pool.hpp"
#include "base/expert_load.hpp"
#include "plugin/expert_partitions.hpp"
#include "backends/cpu/matmul.hpp"
#include "backends/cpu/rope.hpp"
#include "backends/cpu/vector_ops.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {
namespace {

// Elementwise f32 view of a vector weight (norms, biases).
const float* f32(const WeightView& w) { return static_cast<const float*>(w.data); }

// Below this many elements in all, a pass over the batch's rows runs on the calling thread: waking the
// pool costs more than it saves (a decode step's rows are a few thousand elements).
constexpr size_t kParallelElements = 16384;

// Calls fn(begin, end) over rows [0, n_rows), split over the compute pool when the rows hold enough
// work. Each row is computed by one thread with the same code whatever the split.
template <class Fn>
void for_rows(size_t n_rows, size_t elements_per_row, const Fn& fn) {
  if (n_rows < 2 || n_rows * elements_per_row < kParallelElements) return fn(size_t(0), n_rows);
  compute_pool().parallel_for(n_rows, fn);
}

void add_bias(float* y, const WeightView& b, size_t n) {
  if (!b.empty()) vec::add(y, f32(b), n);
}

// The activations of one step, kept by the calling thread from step to step so that a step does not
// allocate (and fault in) fresh pages for them: they are megabytes for a prefill chunk.
struct Workspace {
  std::vector<float> x, xn, q, k, v, att, tmp, ffn_out, gate, up;
  std::vector<double> rope;
  // MoE layers: the router's logits, the gate's weights and ids, the shared expert's output and scale
  // (fresh vectors of megabytes per layer cost a prefill of 64 experts 20% in page faults and zeroing).
  std::vector<float> router_logits, expert_weights, shared, shared_scale;
  std::vector<int32_t> expert_ids;
  // The sampled rows' final norms and their logits ([rows][vocab]: 8 MB for 64 rows of a 32000-token
  // vocabulary).
  std::vector<float> finals, logits;
};
Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

// out = down(silu(gate x) * up x) for n_rows rows of x ([n_rows][dim] each); g and u hold the
// [n_rows][ffn] intermediates.
void swiglu(const ExpertWeights& e, const float* x, size_t n_rows, float* out, std::vector<float>& g,
            std::vector<float>& u) {
  const size_t ffn = size_t(e.gate.rows);
  g.resize(n_rows * ffn);
  u.resize(n_rows * ffn);
  matmul({{e.gate, g.data()}, {e.up, u.data()}}, x, n_rows);
  for_rows(n_rows, ffn, [&](size_t begin, size_t end) {
    vec::silu_mul(g.data() + begin * ffn, u.data() + begin * ffn, (end - begin) * ffn);
  });
  matmul(e.down, g.data(), n_rows, out);
}

// out += the layer's shared expert on x, each row scaled by sigmoid(gate . x) when the layer has
// that gate. Every token runs it, so it is dense math like the MLP's, on the host's kernels (every
// weight type, the batch's rows at once) rather than routed through the moe plugin.
void add_shared_expert(const LayerWeights& L, const float* x, size_t n_rows, size_t dim, float* out, Workspace& ws) {
  std::vector<float>& shared = ws.shared;
  std::vector<float>& scale = ws.shared_scale;
  shared.resize(n_rows * dim);
  scale.assign(n_rows, 1.0f);
  swiglu(L.shared_expert, x, n_rows, shared.data(), ws.gate, ws.up);  // MoE layers have no dense MLP of their own
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

const th_kv_layout& cpu_kv_layout(const ModelWeights& w, PluginInstance& kv) {
  const auto& info = w.spec.info;
  th_error err;
  const th_kv_layout* layout = nullptr;
  if (th_status s = kv.call(&th_kvcache_vtable::get_layout, "get_layout", kv.handle(), &layout, &err)) throw_plugin_failure(kv, "get_layout", s, err);
  if (layout == nullptr) {
    throw std::runtime_error("plugin " + kv.id() + ": get_layout() returned TH_OK without a layout");
  }
  // ABI 1.2: where the pools live. A layout from a plugin built against 1.0 or 1.1 has no such member
  // and lies on the engine's device, the CPU.
  if (const th_device_kind device = abi_member(*layout, &th_kv_layout::device, th_device_kind(TH_DEVICE_CPU));
      device != TH_DEVICE_CPU) {
    throw std::runtime_error("plugin " + kv.id() + ": its KV layout lies on device kind " +
                             std::to_string(device) + ", but the CPU runtime reads and writes host memory only");
  }
  if (layout->n_layers < info.n_layers || layout->n_kv_heads != info.n_kv_heads || layout->head_dim != info.head_dim ||
      layout->block_size == 0) {
    throw std::runtime_error("plugin " + kv.id() + ": its KV layout (" + std::to_string(layout->n_layers) +
                             " layers, " + std::to_string(layout->n_kv_heads) + " kv heads of " +
                             std::to_string(layout->head_dim) + ", block size " + std::to_string(layout->block_size) +
                             ") does not fit the model (" + std::to_string(info.n_layers) + " layers, " +
                             std::to_string(info.n_kv_heads) + " kv heads of " + std::to_string(info.head_dim) + ")");
  }
  if (layout->dtype != TH_DTYPE_F32 && layout->dtype != TH_DTYPE_F16 && layout->dtype != TH_DTYPE_Q8_0) {
    throw std::runtime_error(std::string("the CPU runtime writes f32, f16 and q8_0 KV caches only, the kvcache's layout is ") +
                             quant::dtype_name(layout->dtype));
  }
  if (const std::string why = sdk::kv_q8_layout_problem(*layout); !why.empty())
    throw std::runtime_error("plugin " + kv.id() + ": " + why);
  return *layout;
}

std::vector<std::vector<float>> forward_step(const ModelWeights& w, const StepBatch& batch, const StepPlugins& plugins) {
  const auto& info = w.spec.info;
  const size_t dim = info.dim, hd = info.head_dim, nh = info.n_heads, nkv = info.n_kv_heads;
  static const SlotId kAttention = slot_of(TH_KIND_ATTENTION), kKvcache = slot_of(TH_KIND_KVCACHE), kMoe = slot_of(TH_KIND_MOE);
  PluginInstance* const kv_plugin = plugins.get(kKvcache);
  PluginInstance* const attention_plugin = plugins.get(kAttention);
  PluginInstance* const moe_plugin = plugins.get(kMoe);
  if (kv_plugin == nullptr || attention_plugin == nullptr) throw std::logic_error("a step without an attention or kvcache plugin");
  th_instance* kv_inst = kv_plugin->handle();
  th_error err;
  double* kv_seconds = plugins.seconds_of(kKvcache);
  double* attention_seconds = plugins.seconds_of(kAttention);
  double* moe_seconds = plugins.seconds_of(kMoe);
  std::optional<ScopedSeconds> kv_timer(std::in_place, kv_seconds);  // the layout and block tables

  if (info.n_experts > 0 && moe_plugin == nullptr) {
    throw std::runtime_error("the model has " + std::to_string(info.n_experts) +
                             " experts per layer: its forward pass needs a moe plugin (such as moe.topk)");
  }
  const th_kv_layout* layout = &cpu_kv_layout(w, *kv_plugin);

  // Rows of the batch: every token of every item, in order, each at its place in the cache
  // (`positions`) and rotated by its place in the text (`rope_positions`: the same, but for the tokens of
  // a draft tree, at their depth). Trees are verified under tree attention (row_parent, ABI 1.4).
  std::vector<uint32_t> seq_start = {0}, kv_len;
  std::vector<int32_t> positions, rope_positions, tokens, row_parent;
  const bool any_tree = std::any_of(batch.items.begin(), batch.items.end(), [](const StepItem& i) { return i.is_tree(); });
  for (const auto& item : batch.items) {
    uint32_t end = item.start + uint32_t(item.tokens.size());
    if (th_status s = kv_plugin->call(&th_kvcache_vtable::seq_reserve, "seq_reserve", kv_inst, item.seq_id, end, item.start, &err))
      throw_plugin_failure(*kv_plugin, "seq_reserve", s, err);
    const uint32_t first_row = uint32_t(tokens.size()), n_own = uint32_t(item.tokens.size()) - item.n_draft;
    std::vector<uint32_t> depth;  // of each draft token: 0 for a child of the item's own tokens
    for (uint32_t t = 0; t < item.tokens.size(); ++t) {
      positions.push_back(int32_t(item.start + t));
      tokens.push_back(item.tokens[t]);
      int32_t parent = int32_t(first_row + t) - 1;  // a chain
      uint32_t text_position = item.start + t;
      if (t >= n_own && item.is_tree()) {
        const int32_t p = item.draft_parent[t - n_own];
        depth.push_back(p < 0 ? 0 : depth[size_t(p)] + 1);
        parent = p < 0 ? int32_t(first_row + n_own) - 1 : int32_t(first_row + n_own) + p;
        text_position = item.start + n_own + depth.back();
      }
      rope_positions.push_back(int32_t(text_position));
      if (any_tree) row_parent.push_back(t == 0 ? -1 : parent);
    }
    seq_start.push_back(uint32_t(tokens.size()));
    kv_len.push_back(end);
  }
  // seq_blocks pointers are valid until the next call on the kvcache: copy each table.
  std::vector<std::vector<int32_t>> table_copies;
  for (const auto& item : batch.items) {
    const int32_t* blocks = nullptr;
    uint32_t n = 0;
    if (th_status s = kv_plugin->call(&th_kvcache_vtable::seq_blocks, "seq_blocks", kv_inst, item.seq_id, &blocks, &n, &err))
      throw_plugin_failure(*kv_plugin, "seq_blocks", s, err);
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
  for (int32_t tok : tokens)
    if (tok < 0 || uint32_t(tok) >= info.vocab_size)
      throw std::runtime_error("token id " + std::to_string(tok) + " is outside the vocabulary");
  Workspace& ws = workspace();
  std::vector<float>&x = ws.x, &xn = ws.xn, &q = ws.q, &k = ws.k, &v = ws.v, &att = ws.att, &tmp = ws.tmp,
                    &ffn_out = ws.ffn_out;
  for (auto* buffer : {&x, &xn, &tmp, &ffn_out}) buffer->resize(n_rows * dim);
  for (auto* buffer : {&q, &att}) buffer->resize(n_rows * qdim);
  for (auto* buffer : {&k, &v}) buffer->resize(n_rows * kvdim);
  for_rows(n_rows, dim, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r)
      quant::dequantize_row(w.embed.type, w.embed.row(tokens[r]), &x[r * dim], int64_t(dim));
  });
  rope_angles(rope_positions, hd, w.rope, ws.rope);
  const size_t half = hd / 2;

  for (uint32_t l = 0; l < info.n_layers; ++l) {
    const auto& L = w.layers[l];
    // The residual stream takes the previous layer's feed-forward output, then is normalized.
    for_rows(n_rows, dim, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r) {
        if (l > 0) vec::add(&x[r * dim], &ffn_out[r * dim], dim);
        vec::rmsnorm(&x[r * dim], f32(L.attn_norm), w.rms_eps, &xn[r * dim], dim);
      }
    });
    matmul({{L.wq, q.data()}, {L.wk, k.data()}, {L.wv, v.data()}}, xn.data(), n_rows);
    for_rows(n_rows, qdim + 2 * kvdim, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r) {
        float *qr = &q[r * qdim], *kr = &k[r * kvdim], *vr = &v[r * kvdim];
        add_bias(qr, L.bq, qdim);
        add_bias(kr, L.bk, kvdim);
        add_bias(vr, L.bv, kvdim);
        if (!L.q_norm.empty()) {  // Qwen3: each head's query and key RMS-normed before RoPE (in place: the sum comes first)
          for (size_t h = 0; h < nh; ++h) vec::rmsnorm(qr + h * hd, f32(L.q_norm), w.rms_eps, qr + h * hd, hd);
          for (size_t h = 0; h < nkv; ++h) vec::rmsnorm(kr + h * hd, f32(L.k_norm), w.rms_eps, kr + h * hd, hd);
        }
        rope(qr, nh, hd, &ws.rope[r * half * 2], w.rope.neox);
        rope(kr, nkv, hd, &ws.rope[r * half * 2], w.rope.neox);
        // Store this row's keys and values through the published layout, in its element type.
        uint32_t pos = uint32_t(positions[r]);
        int32_t block = tables[row_seq[r]][pos / layout->block_size];
        uint32_t slot = pos % layout->block_size;
        // Head h of x into pool `base` (q8_0, ABI 1.6: int8 elements, their group scales into scale_base).
        auto store = [&](const float* x, const void* base, const void* scale_base, uint32_t h) {
          auto* dst = const_cast<char*>(sdk::kv_head_bytes(*layout, base, l, block, slot, h));
          if (layout->dtype != TH_DTYPE_Q8_0) return quant::quantize_row(layout->dtype, x, dst, int64_t(hd));
          sdk::quantize_kv_q8(x, uint32_t(hd), layout->quant_group, reinterpret_cast<int8_t*>(dst),
                              const_cast<float*>(sdk::kv_head_scales(*layout, scale_base, l, block, slot, h)));
        };
        for (uint32_t h = 0; h < nkv; ++h) {  // the pools are the host's to write (th_kvcache.h)
          store(kr + h * hd, layout->k_base, layout->k_scale_base, h);
          store(vr + h * hd, layout->v_base, layout->v_scale_base, h);
        }
      }
    });
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
    ab.device = TH_DEVICE_CPU;
    ab.device_index = 0;
    ab.row_parent = any_tree ? row_parent.data() : nullptr;
    {
      ScopedSeconds timer(attention_seconds);
      if (th_status s = attention_plugin->call(&th_attention_vtable::forward, "forward", attention_plugin->handle(), &ab, &err)) throw_plugin_failure(*attention_plugin, "forward", s, err);
    }

    matmul(L.wo, att.data(), n_rows, tmp.data());
    for_rows(n_rows, dim, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r) {
        vec::add(&x[r * dim], &tmp[r * dim], dim);
        vec::rmsnorm(&x[r * dim], f32(L.ffn_norm), w.rms_eps, &xn[r * dim], dim);
      }
    });
    if (info.n_experts == 0) {
      swiglu(L.experts[0], xn.data(), n_rows, ffn_out.data(), ws.gate, ws.up);
    } else {
      const uint32_t ne = info.n_experts, kk = info.n_experts_used;
      std::vector<float>& logits = ws.router_logits;
      std::vector<float>& weights = ws.expert_weights;
      std::vector<int32_t>& ids = ws.expert_ids;
      logits.resize(n_rows * ne);
      weights.resize(n_rows * kk);
      ids.resize(n_rows * kk);
      matmul(L.router, xn.data(), n_rows, logits.data());
      std::fill(ffn_out.begin(), ffn_out.end(), 0.0f);
      ScopedSeconds timer(moe_seconds);  // gating and experts (the experts' products run inside the plugin)
      th_moe_gate_args ga{sizeof ga, l, uint32_t(n_rows), ne, kk, logits.data(), ids.data(), weights.data()};
      if (th_status s = moe_plugin->call(&th_moe_vtable::gate, "gate", moe_plugin->handle(), &ga, &err)) throw_plugin_failure(*moe_plugin, "gate", s, err);
      // Its choices are checked before anything reads them (and counted: the engine's expert load).
      if (const std::string wrong = plugins.expert_load != nullptr ? plugins.expert_load->add(l, ids.data(), weights.data(), ids.size())
                                                                   : ExpertLoad::check(l, ids.data(), ids.size(), ne);
          !wrong.empty())
        throw std::runtime_error(moe_plugin->id() + " gate returned " + wrong);
      std::vector<th_moe_expert_weights> experts;
      for (const auto& e : L.experts) experts.push_back({tensor_view(e.gate), tensor_view(e.up), tensor_view(e.down)});
      th_moe_experts_args ea{sizeof ea, l, uint32_t(n_rows), uint32_t(dim), info.ffn_dim, ne, kk, xn.data(),
                             ids.data(), weights.data(), experts.data(), nullptr, ffn_out.data()};
      if (plugins.expert_partitions != nullptr) plugins.expert_partitions->experts(*moe_plugin, ea);
      else if (th_status s = moe_plugin->call(&th_moe_vtable::experts, "experts", moe_plugin->handle(), &ea, &err)) throw_plugin_failure(*moe_plugin, "experts", s, err);
    }
    if (!L.shared_expert.empty()) add_shared_expert(L, xn.data(), n_rows, dim, ffn_out.data(), ws);
  }
  if (info.n_layers > 0) vec::add(x.data(), ffn_out.data(), n_rows * dim);
  if (batch.hidden != nullptr) {  // embeddings: every row's final state, normed as the logits' rows are
    batch.hidden->resize(n_rows * dim);
    for (size_t r = 0; r < n_rows; ++r) vec::rmsnorm(&x[r * dim], f32(w.out_norm), w.rms_eps, &(*batch.hidden)[r * dim], dim);
  }

  // Logits of each item's marked rows (its last marked_rows()), in one product.
  std::vector<size_t> sampled_rows;
  for (size_t s = 0; s < batch.items.size(); ++s) {
    const uint32_t marked = std::min<uint32_t>(batch.items[s].marked_rows(), uint32_t(batch.items[s].tokens.size()));
    for (uint32_t r = seq_start[s + 1] - marked; r < seq_start[s + 1]; ++r) sampled_rows.push_back(r);
  }
  std::vector<float>&finals = ws.finals, &all = ws.logits;
  finals.resize(sampled_rows.size() * dim);
  all.resize(sampled_rows.size() * size_t(info.vocab_size));
  for (size_t i = 0; i < sampled_rows.size(); ++i)
    vec::rmsnorm(&x[sampled_rows[i] * dim], f32(w.out_norm), w.rms_eps, &finals[i * dim], dim);
  matmul(w.output, finals.data(), sampled_rows.size(), all.data());
  std::vector<std::vector<float>> logits;
  logits.reserve(sampled_rows.size());
  for (size_t i = 0; i < sampled_rows.size(); ++i)
    logits.emplace_back(all.begin() + long(i * info.vocab_size), all.begin() + long((i + 1) * info.vocab_size));
  return logits;
}

}  // namespace tokenhost
