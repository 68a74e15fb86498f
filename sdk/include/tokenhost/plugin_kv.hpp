// tokenhost plugin SDK: header-only C++ helpers for plugins that read the KV cache (C++17).
//
// Like plugin.hpp it adds no ABI: it only computes with the C structs of th_kvcache.h and
// th_attention.h. What it gives:
//   - sdk::dtype_name(): "f32", "q8_0", ... for messages (dtype_names(), dtype_listed() for lists);
//   - sdk::kv_element_bytes(): bytes of one element of a float KV dtype (f32, f16);
//   - sdk::kv_head_bytes() / kv_head_vector() / kv_position_vector(): the th_kv_layout address formula
//     (float dtypes), and sdk::load_kv_vector(): a head vector of an f32 or f16 cache as floats;
//   - 8-bit KV (TH_DTYPE_Q8_0, ABI 1.6): sdk::kv_q8_group() (the group KvBlockPool lays out),
//     kv_scale_bytes(), kv_head_scales(), quantize_kv_q8() / dequantize_kv_q8() (the format th_kvcache.h states), and
//     sdk::load_kv_head(): a head vector of any cache the host writes (f32, f16, q8_0) as floats;
//   - sdk::attention_cpu_refusals(): why a CPU-only attention plugin that computes in f32 over the KV
//     dtypes it lists cannot serve a model (attention_f32_cpu_refusals(): over f32 only);
//   - sdk::validate_attention_batch(): everything an attention forward() reads, checked, as a message;
//   - sdk::row_parent() / tree_visible(): a batch's tree of rows (ABI 1.4) and the positions a row sees;
//   - sdk::batch_device() / kv_layout_device(): where a batch and a KV layout live (ABI 1.2 members,
//     read only when their struct_size covers them).
#ifndef TOKENHOST_PLUGIN_KV_HPP
#define TOKENHOST_PLUGIN_KV_HPP

#include <tokenhost/fp16.hpp>
#include <tokenhost/tokenhost.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace tokenhost::sdk {

inline std::string dtype_name(th_dtype dtype) {
  switch (dtype) {
    case TH_DTYPE_F32: return "f32";
    case TH_DTYPE_F16: return "f16";
    case TH_DTYPE_BF16: return "bf16";
    case TH_DTYPE_Q4_0: return "q4_0";
    case TH_DTYPE_Q8_0: return "q8_0";
    case TH_DTYPE_Q4_K: return "q4_k";
    case TH_DTYPE_Q6_K: return "q6_k";
    case TH_DTYPE_I8: return "i8";
    case TH_DTYPE_I32: return "i32";
    default: return "dtype " + std::to_string(dtype);
  }
}

// Bytes of one element of a float KV dtype: 4 for f32, 2 for f16 (IEEE binary16, see fp16.hpp); 0 for
// any other dtype.
inline uint32_t kv_element_bytes(th_dtype dtype) {
  return dtype == TH_DTYPE_F32 ? 4u : dtype == TH_DTYPE_F16 ? 2u : 0u;
}

// The first byte of the head vector of (layer, pool block, position t within the block, kv head h) in
// base (k_base or v_base), by the address formula of th_kvcache.h. Float dtypes: element d lies
// d * kv_element_bytes(kv.dtype) bytes further.
inline const char* kv_head_bytes(const th_kv_layout& kv, const void* base, uint32_t layer, int32_t block, uint32_t t,
                                 uint32_t h) {
  return static_cast<const char*>(base) + int64_t(layer) * kv.layer_stride + int64_t(block) * kv.block_stride +
         int64_t(h) * kv.head_stride + int64_t(t) * kv.token_stride;
}

// The same head vector as floats, for an f32 cache.
inline const float* kv_head_vector(const th_kv_layout& kv, const void* base, uint32_t layer, int32_t block,
                                   uint32_t t, uint32_t h) {
  return reinterpret_cast<const float*>(kv_head_bytes(kv, base, layer, block, t, h));
}

// The head vector of position p of a sequence whose block table is table (an f32 cache).
inline const float* kv_position_vector(const th_kv_layout& kv, const void* base, uint32_t layer,
                                       const int32_t* table, uint32_t p, uint32_t h) {
  return kv_head_vector(kv, base, layer, table[p / kv.block_size], p % kv.block_size, h);
}

// The kv.head_dim elements at vector (an address from kv_head_bytes) as floats into out, for an f32 or
// f16 cache (exact: every f16 value is a float).
inline void load_kv_vector(const th_kv_layout& kv, const char* vector, float* out) {
  if (kv.dtype == TH_DTYPE_F16) {
    for (uint32_t d = 0; d < kv.head_dim; ++d) {
      uint16_t h;
      std::memcpy(&h, vector + 2 * size_t(d), sizeof h);
      out[d] = fp16_to_f32(h);
    }
  } else {
    std::memcpy(out, vector, size_t(kv.head_dim) * sizeof(float));
  }
}

// ---- 8-bit KV (TH_DTYPE_Q8_0, ABI 1.6): int8 elements, one f32 scale per group of quant_group ----

// The group of a q8_0 cache with heads of head_dim, as KvBlockPool lays it out: 32 when it divides
// head_dim, else the largest divisor of head_dim below 32 (8 for heads of 8: 12 bytes a head vector
// against f16's 16; 36 against 64 for heads of 32).
inline uint32_t kv_q8_group(uint32_t head_dim) {
  for (uint32_t g = std::min(32u, head_dim); g > 1; --g)
    if (head_dim % g == 0) return g;
  return 1;
}

// Bytes of one head vector's elements in the pool: head_dim x 4 (f32), 2 (f16), 1 (q8_0); 0 for a dtype
// no kvcache keeps.
inline uint32_t kv_vector_bytes(th_dtype dtype, uint32_t head_dim) {
  return dtype == TH_DTYPE_Q8_0 ? head_dim : kv_element_bytes(dtype) * head_dim;
}

// Bytes of one head vector's group scales: one f32 per group of `group` for q8_0; 0 for float dtypes.
inline uint32_t kv_scale_bytes(th_dtype dtype, uint32_t head_dim, uint32_t group) {
  return dtype == TH_DTYPE_Q8_0 && group > 0 ? head_dim / group * uint32_t(sizeof(float)) : 0;
}

// The head_dim / quant_group scales of the q8_0 head vector of (layer, pool block, position t, kv head
// h) in scale_base (k_scale_base or v_scale_base), by th_kvcache.h's formula.
inline const float* kv_head_scales(const th_kv_layout& kv, const void* scale_base, uint32_t layer, int32_t block,
                                   uint32_t t, uint32_t h) {
  return reinterpret_cast<const float*>(static_cast<const char*>(scale_base) + int64_t(layer) * kv.scale_layer_stride +
                                        int64_t(block) * kv.scale_block_stride + int64_t(h) * kv.scale_head_stride +
                                        int64_t(t) * kv.scale_token_stride);
}

// x[0, n) as q8_0 (th_kvcache.h): per group of `group`, scale = max |x| / 127 (0 for an all-zero
// group) and each element round(x / scale) in [-127, 127].
inline void quantize_kv_q8(const float* x, uint32_t n, uint32_t group, int8_t* q, float* scales) {
  for (uint32_t g = 0; g * group < n; ++g) {
    const float* xg = x + size_t(g) * group;
    float amax = 0.0f;
    for (uint32_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(xg[i]));
    const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[g] = scale;
    for (uint32_t i = 0; i < group; ++i) q[size_t(g) * group + i] = int8_t(std::clamp(std::round(xg[i] * inv), -127.0f, 127.0f));
  }
}

// The values q8_0 elements stand for: q x scale of their group.
inline void dequantize_kv_q8(const int8_t* q, const float* scales, uint32_t n, uint32_t group, float* out) {
  for (uint32_t g = 0; g * group < n; ++g) {  // group by group: the inner loop vectorizes
    const float s = scales[g];
    const int8_t* qg = q + size_t(g) * group;
    float* og = out + size_t(g) * group;
    for (uint32_t i = 0; i < group; ++i) og[i] = float(qg[i]) * s;
  }
}

// The head vector of (layer, pool block, position t, kv head h), keys or values, as floats into out
// (head_dim of them), for an f32, f16 or q8_0 cache.
inline void load_kv_head(const th_kv_layout& kv, bool values, uint32_t layer, int32_t block, uint32_t t, uint32_t h, float* out) {
  const char* vector = kv_head_bytes(kv, values ? kv.v_base : kv.k_base, layer, block, t, h);
  if (kv.dtype != TH_DTYPE_Q8_0) return load_kv_vector(kv, vector, out);
  dequantize_kv_q8(reinterpret_cast<const int8_t*>(vector), kv_head_scales(kv, values ? kv.v_scale_base : kv.k_scale_base, layer, block, t, h),
                   kv.head_dim, kv.quant_group, out);
}

// Why a q8_0 layout cannot be read ("" when it can, and for float dtypes).
inline std::string kv_q8_layout_problem(const th_kv_layout& kv) {
  if (kv.dtype != TH_DTYPE_Q8_0) return "";
  if (kv.quant_group == 0 || kv.head_dim % kv.quant_group != 0)
    return "kv layout quant_group " + std::to_string(kv.quant_group) + " does not divide head_dim " + std::to_string(kv.head_dim);
  if (kv.k_scale_base == nullptr || kv.v_scale_base == nullptr) return "kv layout has NULL k_scale_base or v_scale_base";
  if (kv.token_stride < int64_t(kv.head_dim) || kv.scale_token_stride < int64_t(kv_scale_bytes(kv.dtype, kv.head_dim, kv.quant_group)))
    return "kv layout token strides are shorter than a q8_0 head vector's elements or scales";
  return "";
}

// Whether dtype is one of dtypes, and their names ("f32, f16") for a message saying it is not.
inline bool dtype_listed(th_dtype dtype, std::initializer_list<th_dtype> dtypes) {
  for (th_dtype t : dtypes)
    if (t == dtype) return true;
  return false;
}
inline std::string dtype_names(std::initializer_list<th_dtype> dtypes) {
  std::string names;
  for (th_dtype t : dtypes) names += (names.empty() ? "" : ", ") + dtype_name(t);
  return names;
}

// Why an attention plugin that computes in f32 on the CPU over a KV cache of one of kv_dtypes cannot
// serve model on device (device may be NULL: not checked). Empty when it can. One reason per entry,
// for check().
inline std::vector<std::string> attention_cpu_refusals(const th_model_info& m, const th_device* device,
                                                       std::initializer_list<th_dtype> kv_dtypes) {
  std::vector<std::string> why;
  if (!dtype_listed(m.kv_dtype, kv_dtypes)) {
    why.push_back("supports kv dtype " + dtype_names(kv_dtypes) + " only, the model's kv dtype is " +
                  dtype_name(m.kv_dtype));
  }
  if (m.act_dtype != TH_DTYPE_F32) {
    why.push_back("supports activation dtype f32 only, the model's is " + dtype_name(m.act_dtype));
  }
  if (m.n_kv_heads == 0 || m.n_heads % m.n_kv_heads != 0) {
    why.push_back("n_heads (" + std::to_string(m.n_heads) + ") must be a multiple of n_kv_heads (" +
                  std::to_string(m.n_kv_heads) + ")");
  }
  if (m.head_dim == 0) why.push_back("head_dim must be > 0");
  if (device != nullptr && device->kind != TH_DEVICE_CPU) why.push_back("runs on the CPU only");
  return why;
}

// Where a batch's arrays and a layout's pools live (ABI 1.2). A batch from a 1.0/1.1 host and a layout
// from a kvcache plugin built against 1.0/1.1 have no such member: both are then host memory.
inline th_device_kind batch_device(const th_attention_batch& b) {
  return TH_HAS_MEMBER(&b, th_attention_batch, device) ? b.device : th_device_kind(TH_DEVICE_CPU);
}
inline th_device_kind kv_layout_device(const th_kv_layout& kv) {
  return TH_HAS_MEMBER(&kv, th_kv_layout, device) ? kv.device : th_device_kind(TH_DEVICE_CPU);
}

// The batch's tree of rows (ABI 1.4), or NULL: a batch from an older host has no such member.
inline const int32_t* row_parent(const th_attention_batch& b) {
  return TH_HAS_MEMBER(&b, th_attention_batch, row_parent) ? b.row_parent : nullptr;
}

// The positions row i (of sequence s) attends to: every position through `through` (inclusive; -1 for
// none), then the positions in `extra`, ascending, all beyond it. Causal rows (no row_parent): through
// = positions[i], extra empty. Under row_parent, through ends the run of the sequence's first rows in
// this batch that are all ancestors of i (a chain's rows: all of them), and extra holds the positions of
// its other ancestors and its own. The batch must be valid (validate_attention_batch()).
inline int64_t tree_visible(const th_attention_batch& b, uint32_t s, uint32_t i, std::vector<uint32_t>& extra) {
  extra.clear();
  const int32_t* parent = row_parent(b);
  if (parent == nullptr) return b.positions[i];
  for (int64_t r = i; r >= 0; r = parent[r]) extra.push_back(uint32_t(r));  // i's path, upward
  std::reverse(extra.begin(), extra.end());
  const uint32_t first = b.seq_start[s];
  size_t k = 0;
  while (k < extra.size() && extra[k] == first + k) ++k;
  const int64_t through = int64_t(b.positions[first]) - 1 + int64_t(k);
  extra.erase(extra.begin(), extra.begin() + long(k));
  for (auto& r : extra) r = uint32_t(b.positions[r]);
  return through;
}

// attention_cpu_refusals over an f32 KV cache only.
inline std::vector<std::string> attention_f32_cpu_refusals(const th_model_info& m, const th_device* device) {
  return attention_cpu_refusals(m, device, {TH_DTYPE_F32});
}

// Checks everything an attention forward() over a KV cache of one of kv_dtypes reads, before any output
// is written: pointers, head counts, row strides, the KV layout against the batch, seq_start, every
// block table entry against the pool, every position against its sequence's kv_len and, under
// row_parent (ABI 1.4), every parent and the rows' consecutive positions. Returns ""
// when the batch is valid, otherwise what is wrong (without a plugin prefix; forward() answers it with
// TH_ERR_INVALID_ARGUMENT).
inline std::string validate_attention_batch(const th_attention_batch* batch,
                                            std::initializer_list<th_dtype> kv_dtypes = {TH_DTYPE_F32}) {
  if (batch == nullptr) return "batch is NULL";
  const th_attention_batch& b = *batch;
  auto str = [](auto v) { return std::to_string(v); };
  if (b.q == nullptr || b.out == nullptr || b.positions == nullptr || b.seq_start == nullptr ||
      (b.n_seqs > 0 && (b.kv_len == nullptr || b.block_tables == nullptr)) || b.kv == nullptr) {
    return "batch has a NULL pointer (q, out, positions, seq_start, kv_len, block_tables or kv)";
  }
  if (b.n_heads == 0 || b.n_kv_heads == 0 || b.n_heads % b.n_kv_heads != 0) {
    return "n_heads (" + str(b.n_heads) + ") must be a positive multiple of n_kv_heads (" + str(b.n_kv_heads) + ")";
  }
  if (b.head_dim == 0) return "head_dim must be > 0";
  const int64_t row = int64_t(b.n_heads) * b.head_dim;
  if (b.q_row_stride < row || b.out_row_stride < row) {
    return "q_row_stride and out_row_stride must be >= n_heads * head_dim (" + str(row) + ")";
  }
  const th_kv_layout& kv = *b.kv;
  if (batch_device(b) != TH_DEVICE_CPU || kv_layout_device(kv) != TH_DEVICE_CPU) {
    return "the batch (device kind " + str(batch_device(b)) + ") and the kv pools (device kind " +
           str(kv_layout_device(kv)) + ") must lie in host memory (TH_DEVICE_CPU)";
  }
  if (!dtype_listed(kv.dtype, kv_dtypes)) {
    return "kv layout dtype is " + dtype_name(kv.dtype) + ", only " + dtype_names(kv_dtypes) + " is supported";
  }
  if (kv.k_base == nullptr || kv.v_base == nullptr) return "kv layout has NULL k_base or v_base";
  if (kv.block_size == 0) return "kv layout block_size is 0";
  if (const std::string why = kv_q8_layout_problem(kv); !why.empty()) return why;
  if (b.layer >= kv.n_layers) {
    return "layer " + str(b.layer) + " is out of range (kv layout has " + str(kv.n_layers) + " layers)";
  }
  if (kv.n_kv_heads != b.n_kv_heads || kv.head_dim != b.head_dim) {
    return "batch n_kv_heads/head_dim (" + str(b.n_kv_heads) + "/" + str(b.head_dim) +
           ") differ from the kv layout's (" + str(kv.n_kv_heads) + "/" + str(kv.head_dim) + ")";
  }
  if (b.seq_start[0] != 0 || b.seq_start[b.n_seqs] != b.n_tokens) {
    return "seq_start must start at 0 and end at n_tokens (" + str(b.n_tokens) + ")";
  }
  // All of seq_start first: with it non-decreasing, every row index below lies in [0, n_tokens).
  for (uint32_t s = 0; s < b.n_seqs; ++s) {
    if (b.seq_start[s + 1] < b.seq_start[s]) return "seq_start decreases at sequence " + str(s);
  }
  for (uint32_t s = 0; s < b.n_seqs; ++s) {
    const uint32_t n_blocks = uint32_t((uint64_t(b.kv_len[s]) + kv.block_size - 1) / kv.block_size);
    if (n_blocks > 0 && b.block_tables[s] == nullptr) return "sequence " + str(s) + " has a NULL block table";
    for (uint32_t j = 0; j < n_blocks; ++j) {
      const int32_t block = b.block_tables[s][j];
      if (block < 0 || uint32_t(block) >= kv.n_blocks) {
        return "sequence " + str(s) + ": block table entry " + str(j) + " = " + str(block) + " is out of range [0, " +
               str(kv.n_blocks) + ")";
      }
    }
    for (uint32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
      if (b.positions[i] < 0 || uint32_t(b.positions[i]) >= b.kv_len[s]) {
        return "sequence " + str(s) + ": row " + str(i) + " has position " + str(b.positions[i]) +
               ", outside [0, kv_len = " + str(b.kv_len[s]) + ")";
      }
    }
    if (const int32_t* parent = row_parent(b)) {
      const uint32_t first = b.seq_start[s];
      for (uint32_t i = first; i < b.seq_start[s + 1]; ++i) {
        if (parent[i] != -1 && (parent[i] < int32_t(first) || parent[i] >= int32_t(i))) {
          return "sequence " + str(s) + ": row " + str(i) + " has parent " + str(parent[i]) +
                 ", neither -1 nor an earlier row of its sequence (rows " + str(first) + " to " + str(i) + ")";
        }
        if (int64_t(b.positions[i]) != int64_t(b.positions[first]) + (i - first)) {
          return "sequence " + str(s) + ": with row_parent its rows hold consecutive positions; row " + str(i) +
                 " has " + str(b.positions[i]) + ", not " + str(int64_t(b.positions[first]) + (i - first));
        }
      }
    }
  }
  return {};
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_KV_HPP
