// The AVX2 kernel set (AVX2 + FMA + F16C): 8 float lanes, integer dot products through
// maddubs/madd. Each kernel is a template over the number of activation rows R sharing a weight row,
// so that the four-row kernel is the one-row kernel's arithmetic, row for row. The float kernels are
// matmul_x86.hpp's, the K-quant ones matmul_kquants.hpp's.
#include "backends/cpu/matmul_kernels.hpp"

#if defined(__x86_64__)
#include "backends/cpu/matmul_x86.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "backends/cpu/matmul_kquants.hpp"
#pragma GCC pop_options

namespace tokenhost::matmul_detail {
namespace {

template <class Wt, size_t R>
TH_AVX2 void dot_float(const uint8_t* w, size_t row_bytes, const FRows& x, size_t n, float* out) {
  float_tile<Wt, 1, R>(w, row_bytes, x, n, out);
}

// Sum of 32 products of signed bytes, as 8 float lanes (the sign trick: |w| * (x with w's sign)).
TH_AVX2_INLINE __m256 dot_i8(__m256i w, __m256i x) {
  const __m256i ax = _mm256_sign_epi8(w, w);
  const __m256i sy = _mm256_sign_epi8(x, w);
  const __m256i pairs = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// The signed bytes wq (scale dw) against block b of R rows (nb blocks each), into acc[0..R).
template <size_t R>
TH_AVX2_INLINE void block_avx2(__m256i wq, float dw, const QRows& x, size_t nb, size_t b, __m256* acc) {
  __m256 s[R];
  block_scales<1, R>(&dw, x, b, s);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) acc[k] = _mm256_fmadd_ps(dot_i8(wq, load256(x.blocks[k * nb + b].q)), s[k], acc[k]);
}

// Two blocks per iteration into two accumulators (the FMA chains overlap), a last odd block into the
// first.
template <size_t R>
TH_AVX2 void dot_q8_0(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(wp);
  __m256 a0[R], a1[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    // Any kernel may be the first to pass these weights (a product of 4-7 rows is a group of four and
    // 0-3 more), streaming them from memory: every one prefetches ahead.
    prefetch_ahead(w + b, 2 * sizeof(BlockQ8_0));
    block_avx2<R>(load256(w[b].q), _cvtsh_ss(w[b].d), x, nb, b, a0);
    block_avx2<R>(load256(w[b + 1].q), _cvtsh_ss(w[b + 1].d), x, nb, b + 1, a1);
  }
  if (b < nb) block_avx2<R>(load256(w[b].q), _cvtsh_ss(w[b].d), x, nb, b, a0);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) out[k] = hsum(_mm256_add_ps(a0[k], a1[k]));
}

// A q4_0 block's 32 weights as signed bytes: element j is the low nibble of q[j], element j + 16
// its high nibble, each minus 8.
TH_AVX2_INLINE __m256i unpack_q4_0(const BlockQ4_0& w) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q));
  const __m128i lo = _mm_and_si128(packed, low), hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

// The nibbles are unpacked once for the R rows.
template <size_t R>
TH_AVX2 void dot_q4_0(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  const BlockQ4_0* w = reinterpret_cast<const BlockQ4_0*>(wp);
  __m256 acc[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) acc[k] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    if (b % 4 == 0) prefetch_ahead(w + b, 4 * sizeof(BlockQ4_0));  // every kernel: see dot_q8_0
    block_avx2<R>(unpack_q4_0(w[b]), _cvtsh_ss(w[b].d), x, nb, b, acc);
  }
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) out[k] = hsum(acc[k]);
}

// Unsigned bytes (at most 128: the pair sums of maddubs must not saturate) by signed bytes.
struct Avx2Dot {
  TH_AVX2_INLINE static __m256i lanes(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  TH_AVX2_INLINE static __m256i lanes(__m256i bias, __m256i u, __m256i s) {
    return _mm256_add_epi32(bias, lanes(u, s));
  }
};

// A type's kernels from its template over R activation rows.
template <class X, void (*One)(const uint8_t*, size_t, const X&, size_t, float*),
          void (*Two)(const uint8_t*, size_t, const X&, size_t, float*),
          void (*Three)(const uint8_t*, size_t, const X&, size_t, float*),
          void (*Four)(const uint8_t*, size_t, const X&, size_t, float*)>
TypeKernels<X> type_kernels() {
  TypeKernels<X> k;
  k.one = One;
  k.two = Two;
  k.three = Three;
  k.four = Four;
  return k;
}

}  // namespace

TH_AVX2 void quantize_avx2(const float* x, size_t nb, int bias_k, QBlock* blocks, float* d, float* sums,
                           size_t d_stride) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (size_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kBlock;
    __m256 v[4];
    #pragma GCC unroll 8
    for (size_t k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + 8 * k);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float scale = amax / 127.0f, inv = scale != 0 ? 1.0f / scale : 0.0f;
    d[b * d_stride] = scale;
    // Products rounded to nearest, ties to even (the default MXCSR mode), packed back in order.
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i i[4];
    #pragma GCC unroll 8
    for (size_t k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vinv));
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    const __m256i qv = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_store_si256(reinterpret_cast<__m256i*>(blocks[b].q), qv);
    // Sums of each four q (exact in 16 and 32 bits).
    const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qv), _mm256_set1_epi16(1));
    if (sums != nullptr) sums[b * d_stride] = scale * float(hsum_i32(sum4));
    if (bias_k == 0) continue;
    const __m256i bias = _mm256_mullo_epi32(sum4, _mm256_set1_epi32(-bias_k));
    _mm256_store_si256(reinterpret_cast<__m256i*>(blocks[b].bias), bias);
  }
}

const KernelSet* avx2_set() {
  static const KernelSet* set = []() -> const KernelSet* {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
      return nullptr;
    static const KernelSet s{"avx2",
                             quantize_avx2,
                             type_kernels<FRows, dot_float<F32Weights, 1>, dot_float<F32Weights, 2>,
                                          dot_float<F32Weights, 3>, dot_float<F32Weights, 4>>(),
                             type_kernels<FRows, dot_float<F16Weights, 1>, dot_float<F16Weights, 2>,
                                          dot_float<F16Weights, 3>, dot_float<F16Weights, 4>>(),
                             type_kernels<QRows, dot_q8_0<1>, dot_q8_0<2>, dot_q8_0<3>, dot_q8_0<4>>(),
                             type_kernels<QRows, dot_q4_0<1>, dot_q4_0<2>, dot_q4_0<3>, dot_q4_0<4>>(),
                             q4_K_kernels<Avx2Dot>(),
                             q6_K_kernels<Avx2Dot>()};
    return &s;
  }();
  return set;
}

}  // namespace tokenhost::matmul_detail

#else

namespace tokenhost::matmul_detail {
const KernelSet* avx2_set() { return nullptr; }
}  // namespace tokenhost::matmul_detail

#endif
