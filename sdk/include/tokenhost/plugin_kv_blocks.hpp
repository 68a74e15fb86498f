// tokenhost plugin SDK: a KV block as bytes of its own (C++17), for code that moves blocks out of one
// pool and into another (to disk, to another engine, to another process).
//
// Like plugin_kv.hpp it adds no ABI: it computes with th_kv_layout alone. A block's image holds every
// layer's keys and values of the block's block_size positions, and (q8_0) their group scales, in an
// order that does not depend on the pool's strides, so an image saved from one pool loads into any
// pool of the same shape:
//   for each layer: keys (head by head, position by position, head_dim elements each), then values;
//   then, for a q8_0 cache, for each layer: the keys' group scales (same order), then the values'.
// What:
//   - sdk::KvBlockShape / kv_block_shape(): what two pools must share for an image to pass between
//     them (block size, layers, kv heads, head dim, dtype, q8_0 group);
//   - sdk::kv_shape_fingerprint(): 64 bits of that shape, for keys and file headers, so that nothing
//     crosses dtypes or shapes;
//   - sdk::kv_block_image_bytes(): an image's size;
//   - sdk::save_kv_block() / load_kv_block(): a pool block to an image and back (memcpy of the longest
//     runs the strides allow).
#ifndef TOKENHOST_PLUGIN_KV_BLOCKS_HPP
#define TOKENHOST_PLUGIN_KV_BLOCKS_HPP

#include <tokenhost/plugin_kv.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tokenhost::sdk {

struct KvBlockShape {
  uint32_t block_size = 0, n_layers = 0, n_kv_heads = 0, head_dim = 0;
  th_dtype dtype = TH_DTYPE_F32;
  uint32_t quant_group = 0;  // q8_0 only; 0 for float dtypes
  bool operator==(const KvBlockShape& o) const {
    return block_size == o.block_size && n_layers == o.n_layers && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim &&
           dtype == o.dtype && quant_group == o.quant_group;
  }
  bool operator!=(const KvBlockShape& o) const { return !(*this == o); }
};

inline KvBlockShape kv_block_shape(const th_kv_layout& kv) {
  KvBlockShape s;
  s.block_size = kv.block_size;
  s.n_layers = kv.n_layers;
  s.n_kv_heads = kv.n_kv_heads;
  s.head_dim = kv.head_dim;
  s.dtype = kv.dtype;
  s.quant_group = kv.dtype == TH_DTYPE_Q8_0 ? kv.quant_group : 0;
  return s;
}

// FNV-1a over the shape's fields, each as 4 little-endian bytes: the same number on every machine.
inline uint64_t kv_shape_fingerprint(const KvBlockShape& s) {
  uint64_t h = 14695981039346656037ull;
  for (uint32_t v : {s.block_size, s.n_layers, s.n_kv_heads, s.head_dim, uint32_t(s.dtype), s.quant_group})
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  return h;
}

namespace detail {

// Bytes of one head vector's elements and of its scales in an image of shape s.
inline size_t kv_image_vector_bytes(const KvBlockShape& s) { return kv_vector_bytes(s.dtype, s.head_dim); }
inline size_t kv_image_scale_bytes(const KvBlockShape& s) { return kv_scale_bytes(s.dtype, s.head_dim, s.quant_group); }

// Copies the n_kv_heads x block_size runs of `unit` bytes of one (layer, block) between a pool at
// base (strides head_stride, token_stride) and an image (packed): to_image says which way. Positions
// of one head that lie back to back in the pool go in one memcpy, and so do whole heads.
inline void copy_block_part(const th_kv_layout& kv, char* pool, int64_t head_stride, int64_t token_stride, size_t unit,
                            char* image, bool to_image) {
  const size_t head_bytes = size_t(kv.block_size) * unit;
  auto copy = [&](char* p, char* img, size_t n) { to_image ? std::memcpy(img, p, n) : std::memcpy(p, img, n); };
  if (token_stride == int64_t(unit) && head_stride == int64_t(head_bytes)) {
    copy(pool, image, head_bytes * kv.n_kv_heads);
    return;
  }
  for (uint32_t h = 0; h < kv.n_kv_heads; ++h) {
    char* head = pool + int64_t(h) * head_stride;
    char* img = image + size_t(h) * head_bytes;
    if (token_stride == int64_t(unit)) {
      copy(head, img, head_bytes);
      continue;
    }
    for (uint32_t t = 0; t < kv.block_size; ++t) copy(head + int64_t(t) * token_stride, img + size_t(t) * unit, unit);
  }
}

inline void copy_block(const th_kv_layout& kv, int32_t block, char* image, bool to_image) {
  const KvBlockShape s = kv_block_shape(kv);
  const size_t part = size_t(kv.n_kv_heads) * kv.block_size * kv_image_vector_bytes(s);
  for (uint32_t l = 0; l < kv.n_layers; ++l)
    for (int v = 0; v < 2; ++v) {
      char* base = static_cast<char*>(v ? kv.v_base : kv.k_base) + int64_t(l) * kv.layer_stride + int64_t(block) * kv.block_stride;
      copy_block_part(kv, base, kv.head_stride, kv.token_stride, kv_image_vector_bytes(s), image, to_image);
      image += part;
    }
  const size_t scales = kv_image_scale_bytes(s);
  if (scales == 0) return;
  const size_t scale_part = size_t(kv.n_kv_heads) * kv.block_size * scales;
  for (uint32_t l = 0; l < kv.n_layers; ++l)
    for (int v = 0; v < 2; ++v) {
      char* base = static_cast<char*>(v ? kv.v_scale_base : kv.k_scale_base) + int64_t(l) * kv.scale_layer_stride +
                   int64_t(block) * kv.scale_block_stride;
      copy_block_part(kv, base, kv.scale_head_stride, kv.scale_token_stride, scales, image, to_image);
      image += scale_part;
    }
}

}  // namespace detail

// Bytes of one block's image for pools of shape s.
inline size_t kv_block_image_bytes(const KvBlockShape& s) {
  return size_t(s.n_layers) * 2 * s.n_kv_heads * s.block_size * (detail::kv_image_vector_bytes(s) + detail::kv_image_scale_bytes(s));
}

// Writes pool block `block` of kv (0 <= block < kv.n_blocks: the caller checks) as an image into out
// (kv_block_image_bytes(kv_block_shape(kv)) bytes). The pool must be in host memory (TH_DEVICE_CPU).
inline void save_kv_block(const th_kv_layout& kv, int32_t block, void* out) {
  detail::copy_block(kv, block, static_cast<char*>(out), true);
}

// Writes an image made by save_kv_block from a pool of the same shape into pool block `block` of kv:
// every position of the block, keys, values and scales. The caller checks the shapes (fingerprints).
inline void load_kv_block(const th_kv_layout& kv, int32_t block, const void* image) {
  detail::copy_block(kv, block, const_cast<char*>(static_cast<const char*>(image)), false);
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_KV_BLOCKS_HPP
