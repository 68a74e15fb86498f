// The AVX-512 kernel set on 512-bit registers, for CPUs whose 512-bit instructions run at full clock
// (AMD Zen 4 and later execute each as two 256-bit halves without lowering the clock, so a 512-bit
// register halves the instructions of a kernel for the same arithmetic). The set "avx512vnni" stays
// the choice on CPUs that slow down on them (see matmul.cpp's preference order).
//
// Float kernels: the arithmetic of the AVX2 and avx512vnni sets' float_tile, lane for lane (a 512-bit
// accumulator's lanes 0-7 are float_tile's first accumulator, 8-15 its second), in tiles of up to four
// weight rows by four activation rows: their results are bit for bit those of the other x86 sets.
// q8_0 and q4_0: four blocks per register (see dot_quads); the K-quants: the avx512vnni set's.
#include "runtime/matmul_kernels.hpp"

#if defined(__x86_64__)
#include "runtime/matmul_x86.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")
#define TH_512_INLINE __attribute__((always_inline)) inline
// GCC 12's 512-bit intrinsics start their results from _mm*_undefined_*(), a self-initialized local
// that -Wuninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tokenhost::matmul_detail {
namespace {

// Sixteen float weights as f32 lanes.
struct F32Weights16 {
  using T = float;
  TH_512_INLINE static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
  static float at(const float* p, size_t j) { return p[j]; }
};
struct F16Weights16 {
  using T = uint16_t;
  TH_512_INLINE static __m512 load16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float at(const uint16_t* p, size_t j) { return quant::fp16_to_f32(p[j]); }
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
      const __m512 a = acc[i][k];
      float s = hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
      for (size_t t = j; t < n; ++t) s += Wt::at(w[i], t) * x[k][t];
      out[i * R + k] = s;
    }
}

// ---- q8_0 and q4_0 four blocks at a time --------------------------------------------------------
// Against activations in the quad layout (QBlock): one register holds the first 16 elements of four
// blocks (unsigned: q8_0 plus 128 by flipping the sign bit, q4_0's nibbles as they are, that is plus
// 8), another their last 16; two vpdpbusd starting from the activations' bias lanes give each block's
// exact dot product in its four lanes, converted and scaled by the weight's scales, then multiplied
// into the accumulator by the activation's: acc += (float(lanes) * dw) * dx, one accumulator per output,
// quads in order, a last partial quad with zeros for the missing blocks (no weight byte past the
// row is read). Every kernel (one row, four, tiles) does exactly this per output: batch invariance.

TH_512_INLINE __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
TH_512_INLINE __m512i load512(const void* p) { return _mm512_load_si512(p); }

// The 16 bytes at p[m] for m < count (1..4) in 128-bit lane m, zeros in the others.
template <class Bytes>
TH_512_INLINE __m512i gather_quarters(Bytes p, size_t count) {
  __m512i v = _mm512_zextsi128_si512(load128(p(0)));
  if (count > 1) v = _mm512_inserti32x4(v, load128(p(1)), 1);
  if (count > 2) v = _mm512_inserti32x4(v, load128(p(2)), 2);
  if (count > 3) v = _mm512_inserti32x4(v, load128(p(3)), 3);
  return v;
}

// The fp16 scales of count (1..4) consecutive blocks from w, block m's in lanes 4m..4m+3 (0 for missing
// blocks): one word permutation of the bytes the blocks span, read with masks that stop at their end.
template <class Block>
TH_512_INLINE __m512 quad_scales(const Block* w, size_t count) {
  constexpr int words = sizeof(Block) / 2;  // a block's stride in 16-bit words; its scale is word 0
  static_assert(sizeof(Block) % 2 == 0 && 3 * words < 64, "four blocks' scales within 128 bytes");
  constexpr short w1 = words, w2 = 2 * words, w3 = 3 * words;  // lanes 31 down to 0:
  const __m512i index = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, w3, w3, w3, w3, w2, w2, w2, w2,
                                         w1, w1, w1, w1, 0, 0, 0, 0);
  const size_t bytes = count * sizeof(Block);
  const auto mask = [](size_t n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; };
  const char* p = reinterpret_cast<const char*>(w);
  const __m512i low = _mm512_maskz_loadu_epi8(mask(bytes), p);
  const __m512i high = 3 * words < 32 || bytes <= 64 ? _mm512_setzero_si512()
                                                     : _mm512_maskz_loadu_epi8(mask(bytes - 64), p + 64);
  __m512i picked = _mm512_permutex2var_epi16(low, index, high);
  // Missing blocks' lanes point at words that the masks zeroed, or, with q4_0's short span, at
  // words of the blocks present: clear them.
  picked = _mm512_maskz_mov_epi16(__mmask32((uint64_t(1) << (4 * count)) - 1), picked);
  return _mm512_cvtph_ps(_mm512_castsi512_si256(picked));
}

struct QuadWeights {
  __m512i first, last;
  __m512 dw;
};

struct Q8_0Quads {
  using Block = BlockQ8_0;
  TH_512_INLINE static QuadWeights load(const BlockQ8_0* w, size_t count) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    return {_mm512_xor_si512(gather_quarters([w](size_t m) { return w[m].q; }, count), flip),
            _mm512_xor_si512(gather_quarters([w](size_t m) { return w[m].q + 16; }, count), flip),
            quad_scales(w, count)};
  }
};

struct Q4_0Quads {
  using Block = BlockQ4_0;
  TH_512_INLINE static QuadWeights load(const BlockQ4_0* w, size_t count) {
    const __m512i packed = gather_quarters([w](size_t m) { return w[m].q; }, count);
    const __m512i low = _mm512_set1_epi8(0x0F);
    return {_mm512_and_si512(packed, low), _mm512_and_si512(_mm512_srli_epi16(packed, 4), low), quad_scales(w, count)};
  }
};

// Four activation scales (one per block of a quad), block m's in lanes 4m..4m+3.
TH_512_INLINE __m512 spread_scales(const float* d) {
  const __m512i index = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(_mm_loadu_ps(d)));
}

TH_512_INLINE float hsum512(__m512 a) {
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}

// Quad b / 4 of W weight rows against R activation rows, into acc[i * R + k].
template <class Quads, size_t W, size_t R>
TH_512_INLINE void quad_step(const typename Quads::Block* const* w, const QRows& x, size_t stride, size_t b,
                             size_t count, __m512* acc) {
  QuadWeights qw[W];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) qw[i] = Quads::load(w[i] + b, count);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) {
    const QuadBlock& xq = *reinterpret_cast<const QuadBlock*>(x.blocks + k * stride + b);
    const __m512 dx = spread_scales(x.d + k * stride + b);
    const __m512i bias = load512(xq.bias), first = load512(xq.first), last = load512(xq.last);
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) {
      const __m512i lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias, qw[i].first, first), qw[i].last, last);
      acc[i * R + k] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lanes), qw[i].dw), dx, acc[i * R + k]);
    }
  }
}

// out[i * R + k] = dot(weight row i, activation row k) over nb blocks; the one-row kernel prefetches.
template <class Quads, size_t W, size_t R>
void dot_quads(const uint8_t* wp, size_t row_bytes, const QRows& x, size_t nb, float* out) {
  using Block = typename Quads::Block;
  const size_t stride = quad_blocks(nb);
  const Block* w[W];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) w[i] = reinterpret_cast<const Block*>(wp + i * row_bytes);
  __m512 acc[W * R];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W * R; ++i) acc[i] = _mm512_setzero_ps();
  size_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    if constexpr (W == 1 && R == 1) prefetch_ahead(w[0] + b, 4 * sizeof(Block));
    quad_step<Quads, W, R>(w, x, stride, b, 4, acc);
  }
  if (b < nb) quad_step<Quads, W, R>(w, x, stride, b, nb - b, acc);
  #pragma GCC unroll 8
  for (size_t i = 0; i < W * R; ++i) out[i] = hsum512(acc[i]);
}

template <class Quads>
TypeKernels<QRows> quad_kernels(int bias_k) {
  TypeKernels<QRows> k;
  k.one = dot_quads<Quads, 1, 1>;
  k.four = dot_quads<Quads, 1, 4>;
  k.tile = dot_quads<Quads, 2, 4>;
  k.tile_rows = 2;
  k.bias_k = bias_k;
  k.layout = QLayout::quads;
  return k;
}

template <class Wt>
TypeKernels<FRows> float_kernels() {
  TypeKernels<FRows> k;
  k.one = float_tile_512<Wt, 1, 1>;
  k.four = float_tile_512<Wt, 1, 4>;
  k.tile = float_tile_512<Wt, 4, 4>;
  k.tile_rows = 4;
  return k;
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
                             quad_kernels<Q8_0Quads>(128),
                             quad_kernels<Q4_0Quads>(8),
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
