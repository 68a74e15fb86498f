// Helpers shared by the x86 kernel sets. Everything is compiled for the features it names whatever the
// build flags (target attributes), and called only where the CPU has them. Loops over the rows of a
// tile carry `#pragma GCC unroll`: at -O2 GCC leaves them rolled, with the accumulators on the stack.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>

#include "model/quant.hpp"
#include "backends/cpu/matmul_kernels.hpp"

#define TH_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TH_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace tokenhost::matmul_detail {

TH_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TH_AVX2_INLINE int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// How far ahead of the block being multiplied a kernel of one to three rows (the first pass over the
// weights, streaming them from memory) prefetches them into L1. A decode product streams every weight
// row once, and the hardware prefetchers (which stop at each 4 KiB
// page) left it waiting on memory: 3 KiB ahead took a one-row product streaming from memory from ~14
// to ~18 GMAC/s (q8_0) and ~22 to ~30 (q4_0) on 2 cores (bench_matmul_speed), and 1.1B Q8_0 decode
// from ~70% to ~85% of its bandwidth floor; q4_K and q6_K gained ~40%. 1-2 KiB gained little, 4-16 KiB
// no more. The float kernels read 64 bytes per step, which the hardware keeps up with: prefetching
// there measured a little slower. A prefetch past the end of the matrix is harmless (no fault).
constexpr size_t kPrefetchAhead = 3072;

// Prefetches the weight bytes kPrefetchAhead past [p, p + bytes), one instruction per 64-byte line.
inline void prefetch_ahead(const void* p, size_t bytes) {
  const char* ahead = static_cast<const char*>(p) + kPrefetchAhead;
  for (size_t line = 0; line < bytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
}

TH_AVX2_INLINE __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The scales dw_i * d_k of W weight rows and R activation rows at block b, each broadcast to 8
// lanes: s[i * R + k]. For a tile the products are one multiplication (each rounded as alone), then
// spread by permutations.
template <size_t W, size_t R>
TH_AVX2_INLINE void block_scales(const float* dw, const QRows& x, size_t b, __m256* s) {
  static_assert((W == 1 && R >= 1 && R <= 4) || (W * R <= 8 && R == 4), "tiles of 1 x 1..4 or 2 x 4");
  const float* dx = x.d + b * x.d_stride;
  if constexpr (R == 1) {
    s[0] = _mm256_set1_ps(dw[0] * dx[0]);
  } else {
    // 2 and 3 rows read only theirs (the scale array may end at the last row's value).
    const __m128 d4 = R == 4 ? _mm_loadu_ps(dx) : _mm_setr_ps(dx[0], dx[1], R > 2 ? dx[2] : 0.0f, 0.0f);
    __m256 p;
    if constexpr (W == 1)
      p = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(dw[0]), d4));
    else
      p = _mm256_mul_ps(_mm256_set_m128(_mm_set1_ps(dw[1]), _mm_set1_ps(dw[0])), _mm256_set_m128(d4, d4));
    #pragma GCC unroll 8
    for (size_t i = 0; i < W * R; ++i) s[i] = _mm256_permutevar8x32_ps(p, _mm256_set1_epi32(int(i)));
  }
}

// Float weights, eight at a time as f32 lanes.
struct F32Weights {
  using T = float;
  TH_AVX2_INLINE static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float at(const float* p, size_t j) { return p[j]; }
};
struct F16Weights {
  using T = uint16_t;
  TH_AVX2_INLINE static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float at(const uint16_t* p, size_t j) { return quant::fp16_to_f32(p[j]); }
};

// W weight rows (Wt::T elements, row_bytes apart) against R float activation rows: out[i * R + k].
// Each output sums steps of 16 elements into two accumulators (elements 0-7 and 8-15 of each step),
// adds them across lanes, then the tail past the last step in order: the same arithmetic whatever W
// and R. The sets instantiate it inside their own target (the AVX-512 one has 32 registers).
template <class Wt, size_t W, size_t R>
TH_AVX2_INLINE void float_tile(const uint8_t* wp, size_t row_bytes, const FRows& xs, size_t n, float* out) {
  using T = typename Wt::T;
  const T* w[W];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) w[i] = reinterpret_cast<const T*>(wp + i * row_bytes);
  const float* x[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) x[k] = xs.x + k * xs.stride;
  __m256 a0[W][R], a1[W][R];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i)
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) a0[i][k] = a1[i][k] = _mm256_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 x0[R], x1[R];
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) {
      x0[k] = _mm256_loadu_ps(x[k] + j);
      x1[k] = _mm256_loadu_ps(x[k] + j + 8);
    }
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) {
      const __m256 w0 = Wt::load8(w[i] + j), w1 = Wt::load8(w[i] + j + 8);
      #pragma GCC unroll 8
      for (size_t k = 0; k < R; ++k) {
        a0[i][k] = _mm256_fmadd_ps(w0, x0[k], a0[i][k]);
        a1[i][k] = _mm256_fmadd_ps(w1, x1[k], a1[i][k]);
      }
    }
  }
  for (size_t i = 0; i < W; ++i)
    for (size_t k = 0; k < R; ++k) {
      float s = hsum(_mm256_add_ps(a0[i][k], a1[i][k]));
      for (size_t t = j; t < n; ++t) s += Wt::at(w[i], t) * x[k][t];
      out[i * R + k] = s;
    }
}

// The AVX2 quantizer (quantize_portable's results, 32 elements at a time).
void quantize_avx2(const float* x, size_t nb, int bias_k, QBlock* blocks, float* d, float* sums, size_t d_stride);

}  // namespace tokenhost::matmul_detail
#endif
