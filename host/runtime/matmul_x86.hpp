// Helpers shared by the x86 kernel sets. Everything is compiled for the features it names whatever the
// build flags (target attributes), and called only where the CPU has them. Loops over the rows of a
// tile carry `#pragma GCC unroll`: at -O2 GCC leaves them rolled, with the accumulators on the stack.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>

#include "runtime/matmul_kernels.hpp"

#define TH_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TH_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

namespace tokenhost::matmul_detail {

TH_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TH_AVX2_INLINE __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The AVX2 quantizer (quantize_portable's results, 32 elements at a time).
void quantize_avx2(const float* x, size_t nb, int bias_k, QBlock* blocks, float* d, size_t d_stride);

}  // namespace tokenhost::matmul_detail
#endif
