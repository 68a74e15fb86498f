// attention.cpu_flash's kernels: the dot products of a query with a block's keys, the weighted sum of
// its values and the exponentials of the scores, in a portable version and SIMD ones, chosen at run
// time, over an f32 or an f16 KV cache. Keys and values of one block lie `stride` bytes apart
// (th_kv_layout.token_stride); f16 elements are IEEE binary16, turned into floats as they are read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cpu_flash {

template <class T>
inline const T* at(const char* base, int64_t stride, uint32_t t) {
  return reinterpret_cast<const T*>(base + int64_t(t) * stride);
}

// The two kernels that read the cache, for one element type.
struct CacheKernels {
  // s[t] = scale * (q . k_t) for t < n (d elements each, n >= 1); returns the largest s[t] (found in
  // the kernel's registers: a scalar pass over s after it took as long as the dot products).
  float (*scores)(const float* q, const char* k, int64_t stride, uint32_t n, uint32_t d, float scale, float* s);
  // acc += sum over t < n of p[t] * v_t. The block's sum is formed apart and then added: the rounding
  // error grows with the number of blocks, not of positions.
  void (*accum)(float* acc, const float* p, const char* v, int64_t stride, uint32_t n, uint32_t d);
};

struct Kernels {
  CacheKernels f32;  // TH_DTYPE_F32 caches
  CacheKernels f16;  // TH_DTYPE_F16 caches
  // s[t] = exp(s[t] - m) for t < n; returns their sum.
  float (*exp_sum)(float* s, uint32_t n, float m);
  // out[i] = q[i] x scales[i / group] for i < n: a q8_0 head vector as floats (tokenhost/plugin_kv.hpp's
  // dequantize_kv_q8, the same values), for the tiles a q8_0 cache's blocks are read through.
  void (*dequant_q8)(const int8_t* q, const float* scales, uint32_t n, uint32_t group, float* out);
  const char* name;
};

// The kernels of a level: "portable", "avx2" (AVX2 + FMA + F16C); null where the CPU (or the build)
// lacks it. (512-bit versions were measured: a decode row reads each key and value once, and they were
// no faster than the AVX2 ones on Zen 5; the time goes to memory, which prefetch_block addresses.)
const Kernels* portable_kernels();
const Kernels* avx2_kernels();

// The kernels called `name`, or for "auto" the fastest level this CPU runs (the portable ones when
// $TOKENHOST_PORTABLE_KERNELS is set). Null for an unknown name or a level this CPU lacks.
const Kernels* find_kernels(const std::string& name);

}  // namespace cpu_flash
