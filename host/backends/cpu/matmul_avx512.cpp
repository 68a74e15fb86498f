// The AVX-512 kernel set on 512-bit registers, for CPUs whose 512-bit instructions run at full clock
// (AMD's Zen 4 executes each as two 256-bit halves, Zen 5 at full width, neither lowering the clock,
// so a 512-bit register halves the instructions of a kernel for the same arithmetic). The set
// "avx512vnni" stays the choice on CPUs that slow down on them (see matmul.cpp's preference order).
//
// Float kernels: the arithmetic of the AVX2 and avx512vnni sets' float_tile, lane for lane (a 512-bit
// accumulator's lanes 0-7 are float_tile's first accumulator, 8-15 its second), in tiles of up to four
// weight rows by four activation rows: their results are bit for bit those of the other x86 sets.
// q8_0 and q4_0: matmul_avx512_int8.cpp's; the K-quants: the avx512vnni set's.
#include "backends/cpu/matmul_kernels.hpp"

#if defined(__x86_64__)
#include "backends/cpu/matmul_avx512_target.hpp"  // last: what follows is 512-bit code

namespace tokenhost::matmul_detail {
namespace {

// The float weights, sixteen at a time as f32 lanes.
struct F32Weights16 : F32Weights {
  TH_512_INLINE static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
};
struct F16Weights16 : F16Weights {
  TH_512_INLINE static __m512 load16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};

// W weight rows against R activation rows: out[i * R + k], as float_tile<Wt, W, R> computes it.
template <class Wt, size_t W, size_t R>
void float_tile_512(const uint8_t* wp, size_t row_bytes, const FRows& xs, size_t n, float* out) {
  using T = typename Wt::T;
  const T* w[W];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) w[i] = reinterpret_cast<const T*>(wp + i * row_bytes);
  const float* x[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) x[k] = xs.x + k * xs.stride;
  __m512 acc[W][R];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i)
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) acc[i][k] = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 xv[R];
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) xv[k] = _mm512_loadu_ps(x[k] + j);
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) {
      const __m512 wv = Wt::load16(w[i] + j);
      #pragma GCC unroll 8
      for (size_t k = 0; k < R; ++k) acc[i][k] = _mm512_fmadd_ps(wv, xv[k], acc[i][k]);
    }
  }
  for (size_t i = 0; i < W; ++i)
    for (size_t k = 0; k < R; ++k) {
      float s = hsum512(acc[i][k]);
      for (size_t t = j; t < n; ++t) s += Wt::at(w[i], t) * x[k][t];
      out[i * R + k] = s;
    }
}

template <class Wt>
TypeKernels<FRows> float_kernels() {
  return tile_kernels<FRows>(float_tile_512<Wt, 1, 1>, float_tile_512<Wt, 1, 2>, float_tile_512<Wt, 1, 3>,
                             float_tile_512<Wt, 1, 4>, float_tile_512<Wt, 4, 4>, 4);
}

}  // namespace

const KernelSet* avx512_set() {
  static const KernelSet* set = []() -> const KernelSet* {
    const KernelSet* vnni = avx512vnni_set();
    if (vnni == nullptr || !__builtin_cpu_supports("avx512dq")) return nullptr;
    static const KernelSet s{"avx512",
                             vnni->quantize,
                             float_kernels<F32Weights16>(),
                             float_kernels<F16Weights16>(),
                             avx512_q8_0_kernels(),
                             avx512_q4_0_kernels(),
                             vnni->q4_K,
                             vnni->q6_K};
    return &s;
  }();
  return set;
}

}  // namespace tokenhost::matmul_detail

#pragma GCC pop_options

#else

namespace tokenhost::matmul_detail {
const KernelSet* avx512_set() { return nullptr; }
}  // namespace tokenhost::matmul_detail

#endif
