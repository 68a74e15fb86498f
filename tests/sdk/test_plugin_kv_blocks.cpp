// sdk/include/tokenhost/plugin_kv_blocks.hpp: a block's image is the order the header states (checked
// against plain loops over the address formula), whatever the pool's strides; an image saved from one
// pool loads into a pool of other strides and gives back every head vector and scale byte for byte;
// the fingerprint tells shapes apart. Random contents, f32, f16 and q8_0.
#include <catch2/catch.hpp>

#include <tokenhost/plugin_kv_blocks.hpp>

#include <random>
#include <vector>

#include "harness.hpp"

namespace sdk_plugin_kv_blocks_tests {

using namespace tokenhost;
using namespace tokenhost::sdk;

namespace {

// A pool of shape s in host memory, filled with random bytes. token_major: positions of all heads
// interleaved, each vector padded by 8 bytes (no run longer than one vector); else the SDK pool's
// order (a head's positions back to back).
struct Pool {
  th_kv_layout kv{};
  std::vector<char> k, v, ks, vs;
  Pool(const KvBlockShape& s, uint32_t n_blocks, bool token_major, std::mt19937_64& rng) {
    kv.struct_size = sizeof kv;
    kv.block_size = s.block_size;
    kv.n_blocks = n_blocks;
    kv.n_layers = s.n_layers;
    kv.n_kv_heads = s.n_kv_heads;
    kv.head_dim = s.head_dim;
    kv.dtype = s.dtype;
    kv.quant_group = s.quant_group;
    auto strides = [&](int64_t unit, int64_t& layer, int64_t& block, int64_t& head, int64_t& token) {
      if (token_major) {
        head = unit + 8;
        token = head * s.n_kv_heads;
        block = token * s.block_size;
      } else {
        token = unit;
        head = token * s.block_size;
        block = head * s.n_kv_heads;
      }
      layer = block * n_blocks;
    };
    strides(kv_vector_bytes(s.dtype, s.head_dim), kv.layer_stride, kv.block_stride, kv.head_stride, kv.token_stride);
    k.resize(size_t(kv.layer_stride) * s.n_layers);
    v.resize(k.size());
    kv.k_base = k.data();
    kv.v_base = v.data();
    if (const uint32_t sb = kv_scale_bytes(s.dtype, s.head_dim, s.quant_group)) {
      strides(sb, kv.scale_layer_stride, kv.scale_block_stride, kv.scale_head_stride, kv.scale_token_stride);
      ks.resize(size_t(kv.scale_layer_stride) * s.n_layers);
      vs.resize(ks.size());
      kv.k_scale_base = ks.data();
      kv.v_scale_base = vs.data();
    }
    for (auto* buf : {&k, &v, &ks, &vs})
      for (char& c : *buf) c = char(rng());
  }
};

// The image of block b by the header's order, written with plain loops over th_kvcache.h's formula.
std::vector<char> reference_image(const th_kv_layout& kv, int32_t b) {
  const KvBlockShape s = kv_block_shape(kv);
  const size_t vb = kv_vector_bytes(s.dtype, s.head_dim), sb = kv_scale_bytes(s.dtype, s.head_dim, s.quant_group);
  std::vector<char> out;
  for (uint32_t l = 0; l < kv.n_layers; ++l)
    for (const void* base : {kv.k_base, kv.v_base})
      for (uint32_t h = 0; h < kv.n_kv_heads; ++h)
        for (uint32_t t = 0; t < kv.block_size; ++t) {
          const char* p = kv_head_bytes(kv, base, l, b, t, h);
          out.insert(out.end(), p, p + vb);
        }
  if (sb > 0)
    for (uint32_t l = 0; l < kv.n_layers; ++l)
      for (const void* base : {kv.k_scale_base, kv.v_scale_base})
        for (uint32_t h = 0; h < kv.n_kv_heads; ++h)
          for (uint32_t t = 0; t < kv.block_size; ++t) {
            const char* p = reinterpret_cast<const char*>(kv_head_scales(kv, base, l, b, t, h));
            out.insert(out.end(), p, p + sb);
          }
  return out;
}

}  // namespace

TEST_CASE("sdk kv blocks: images follow the stated order and move blocks between pools of other strides", "[sdk][kv_blocks]") {
  auto rng = testing::fresh_rng("kv block images");
  for (th_dtype dtype : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0}) {
    KvBlockShape s;
    s.block_size = 1 + uint32_t(rng() % 16);
    s.n_layers = 1 + uint32_t(rng() % 3);
    s.n_kv_heads = 1 + uint32_t(rng() % 4);
    s.head_dim = 8 * (1 + uint32_t(rng() % 8));
    s.dtype = dtype;
    s.quant_group = dtype == TH_DTYPE_Q8_0 ? kv_q8_group(s.head_dim) : 0;
    INFO(dtype_name(dtype) << ": block " << s.block_size << ", layers " << s.n_layers << ", heads " << s.n_kv_heads << ", dim "
                           << s.head_dim);
    for (bool from_token_major : {false, true}) {
      Pool from(s, 5, from_token_major, rng), to(s, 7, !from_token_major, rng);
      REQUIRE(kv_block_shape(from.kv) == s);
      const int32_t b = int32_t(rng() % 5), into = int32_t(rng() % 7), neighbour = (into + 1) % 7;
      std::vector<char> image(kv_block_image_bytes(s));
      save_kv_block(from.kv, b, image.data());
      REQUIRE(image == reference_image(from.kv, b));
      const std::vector<char> neighbour_before = reference_image(to.kv, neighbour);
      load_kv_block(to.kv, into, image.data());
      REQUIRE(reference_image(to.kv, into) == image);
      REQUIRE(reference_image(to.kv, neighbour) == neighbour_before);  // no other block written
      // Read back as values, the moved block is the same too.
      std::vector<float> a(s.head_dim), c(s.head_dim);
      for (uint32_t l = 0; l < s.n_layers; ++l)
        for (uint32_t t = 0; t < s.block_size; ++t)
          for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
            load_kv_head(from.kv, true, l, b, t, h, a.data());
            load_kv_head(to.kv, true, l, into, t, h, c.data());
            REQUIRE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0);
          }
    }
  }
}

TEST_CASE("sdk kv blocks: the fingerprint tells every shape member apart", "[sdk][kv_blocks]") {
  KvBlockShape s{16, 12, 12, 64, TH_DTYPE_Q8_0, 32};
  const uint64_t base = kv_shape_fingerprint(s);
  REQUIRE(kv_shape_fingerprint(KvBlockShape{16, 12, 12, 64, TH_DTYPE_Q8_0, 32}) == base);
  for (int member = 0; member < 6; ++member) {
    KvBlockShape o = s;
    switch (member) {
      case 0: o.block_size = 32; break;
      case 1: o.n_layers = 11; break;
      case 2: o.n_kv_heads = 4; break;
      case 3: o.head_dim = 128; break;
      case 4: o.dtype = TH_DTYPE_F16; break;
      default: o.quant_group = 16; break;
    }
    INFO("member " << member);
    REQUIRE(o != s);
    REQUIRE(kv_shape_fingerprint(o) != base);
  }
  REQUIRE(kv_block_image_bytes(s) == size_t(12) * 2 * 12 * 16 * (64 + 2 * 4));
  REQUIRE(kv_block_image_bytes(KvBlockShape{16, 12, 12, 64, TH_DTYPE_F16, 0}) == size_t(12) * 2 * 12 * 16 * 128);
}

}  // namespace sdk_plugin_kv_blocks_tests
