// The AVX-512 VNNI kernel set, on 256-bit registers: `vpdpbusd ymm` multiplies unsigned by signed
// bytes and sums each four into an int32 lane in one instruction, where AVX2 needs sign, maddubs and
// madd. 512-bit registers are not used: on the Xeons that have VNNI they lower the clock and share
// one port, and were measured slower. The AVX-512 VL encoding also gives 32 vector registers, which
// hold the accumulators of a tile of two weight rows by four activation rows.
//
// The weights become unsigned by an offset K (q8_0: w + 128, by flipping the sign bit; q4_0: the
// nibble itself, that is w + 8), and each lane starts at the activation row's bias, -K times the sum
// of its activation bytes: each lane then holds the exact signed dot product of its elements. q8_0 and
// q4_0 take blocks in pairs (eight elements a lane, against activations laid out in pairs; see
// QBlock). The K-quant kernels are matmul_kquants.hpp's.
#include "backends/cpu/matmul_kernels.hpp"

#if defined(__x86_64__)
#include "backends/cpu/matmul_x86.hpp"

#define TH_VNNI_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define TH_VNNI __attribute__((target(TH_VNNI_TARGET)))
#define TH_VNNI_INLINE __attribute__((target(TH_VNNI_TARGET), always_inline)) inline

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")  // TH_VNNI_TARGET: no macro here
#include "backends/cpu/matmul_kquants.hpp"
#pragma GCC pop_options

namespace tokenhost::matmul_detail {
namespace {

TH_VNNI_INLINE __m256i unsigned_q8_0(const BlockQ8_0& w) {
  return _mm256_xor_si256(load256(w.q), _mm256_set1_epi8(char(0x80)));
}

// A q4_0 block's nibbles as bytes 0..15 in element order: the 16 packed bytes in both halves, the
// upper half shifted right by 4.
TH_VNNI_INLINE __m256i unsigned_q4_0(const BlockQ4_0& w) {
  const __m256i packed = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q)));
  const __m256i shift = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
  return _mm256_and_si256(_mm256_srlv_epi16(packed, shift), _mm256_set1_epi8(0x0F));
}

// Block b of W weight rows against block b of R activation rows, into acc[i * R + k]: the unsigned
// weights against the activation bytes, each lane starting at the bias, then scaled. The kernels below
// use it for a last block that has no pair.
template <class Block, __m256i (*Unpack)(const Block&), size_t W, size_t R>
TH_VNNI_INLINE void block_vnni(const Block* const* w, const QRows& x, size_t nb, size_t b, __m256* acc) {
  __m256i wu[W];
  float dw[W];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) {
    wu[i] = Unpack(w[i][b]);
    dw[i] = _cvtsh_ss(w[i][b].d);
  }
  __m256 s[W * R];
  block_scales<W, R>(dw, x, b, s);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) {
    const QBlock& xb = x.blocks[k * nb + b];
    const __m256i bias = _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.bias));
    const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.q));
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) {
      const __m256i lanes = _mm256_dpbusd_epi32(bias, wu[i], q);
      acc[i * R + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), s[i * R + k], acc[i * R + k]);
    }
  }
}

// Blocks in pairs, against activations in the pair layout (QBlock): one register holds the first 16
// elements of blocks b and b + 1 (unsigned, as Unpack makes them), another their last 16; two
// vpdpbusd sum both into the same lanes (0-3: block b, 4-7: block b + 1), so a pair costs one
// conversion and one multiply-add per activation row where two blocks alone cost two of each. Pair p
// goes to accumulator p % 2, a last odd block (block_vnni) to accumulator (its pair index) % 2: the
// one-row kernels and the tiles keep this order row for row.

// q4_0: the 16 packed bytes of both blocks in one register; low nibbles are elements 0-15, high 16-31.
TH_VNNI_INLINE void pair_q4_0(const BlockQ4_0& w0, const BlockQ4_0& w1, __m256i& first, __m256i& last) {
  const __m256i packed =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w0.q))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(w1.q)), 1);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  first = _mm256_and_si256(packed, mask);
  last = _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask);
}

// q8_0: the halves of both blocks gathered, made unsigned by flipping the sign bit (w + 128).
TH_VNNI_INLINE void pair_q8_0(const BlockQ8_0& w0, const BlockQ8_0& w1, __m256i& first, __m256i& last) {
  const auto half = [](const int8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  first = _mm256_xor_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(half(w0.q)), half(w1.q), 1), flip);
  last = _mm256_xor_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(half(w0.q + 16)), half(w1.q + 16), 1), flip);
}

// The exact lanes of a pair: x0 and x1 are the row's paired blocks b and b + 1.
TH_VNNI_INLINE __m256i pair_lanes(__m256i first, __m256i last, const QBlock& x0, const QBlock& x1) {
  const __m256i bias = _mm256_load_si256(reinterpret_cast<const __m256i*>(x0.bias));
  const __m256i q0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x0.q));
  const __m256i q1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(x1.q));
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(bias, first, q0), last, q1);
}

// Pair (b, b + 1) of W weight rows against R activation rows into acc[i * R + k]. Lanes 0-3 are scaled
// by dw_b * dx_b, lanes 4-7 by dw_b+1 * dx_b+1 (each product rounded as alone).
template <class Block, void (*Pair)(const Block&, const Block&, __m256i&, __m256i&), size_t W, size_t R>
TH_VNNI_INLINE void pair_vnni(const Block* const* w, const QRows& x, size_t nb, size_t b, __m256* acc) {
  __m256i first[W], last[W];
  __m256 p[W];  // R = 1: lanes 0-3 dw_b * dx_b, 4-7 dw_b+1 * dx_b+1; R = 4: row k in lanes k and 4 + k
  const float* dx0 = x.d + b * x.d_stride;
  const float* dx1 = x.d + (b + 1) * x.d_stride;
  const __m256 dx = R == 1 ? _mm256_set_m128(_mm_set1_ps(dx1[0]), _mm_set1_ps(dx0[0]))
                           : _mm256_set_m128(_mm_loadu_ps(dx1), _mm_loadu_ps(dx0));
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) {
    Pair(w[i][b], w[i][b + 1], first[i], last[i]);
    const __m256 dw = _mm256_set_m128(_mm_set1_ps(_cvtsh_ss(w[i][b + 1].d)), _mm_set1_ps(_cvtsh_ss(w[i][b].d)));
    p[i] = _mm256_mul_ps(dw, dx);
  }
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) {
    const QBlock& x0 = x.blocks[k * nb + b];
    const QBlock& x1 = x.blocks[k * nb + b + 1];
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) {
      const __m256 s = R == 1 ? p[i]
                              : _mm256_permutevar8x32_ps(p[i], _mm256_setr_epi32(int(k), int(k), int(k), int(k),
                                                                                 int(4 + k), int(4 + k), int(4 + k),
                                                                                 int(4 + k)));
      const __m256i lanes = pair_lanes(first[i], last[i], x0, x1);
      acc[i * R + k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), s, acc[i * R + k]);
    }
  }
}

template <class Block, __m256i (*Unpack)(const Block&), void (*Pair)(const Block&, const Block&, __m256i&, __m256i&),
          size_t W, size_t R>
TH_VNNI void dot_pairs(const uint8_t* wp, size_t row_bytes, const QRows& x, size_t nb, float* out) {
  const Block* w[W];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W; ++i) w[i] = reinterpret_cast<const Block*>(wp + i * row_bytes);
  __m256 a0[W * R], a1[W * R];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W * R; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    // Every kernel may be the first to pass a block of weight rows, streaming them from memory (a
    // product of 4-7 rows is one group of four and 0-3 more): prefetch ahead for each row it reads.
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) prefetch_ahead(w[i] + b, 4 * sizeof(Block));
    pair_vnni<Block, Pair, W, R>(w, x, nb, b, a0);
    pair_vnni<Block, Pair, W, R>(w, x, nb, b + 2, a1);
  }
  if (b + 2 <= nb) {
    pair_vnni<Block, Pair, W, R>(w, x, nb, b, a0);
    b += 2;
  }
  if (b < nb) block_vnni<Block, Unpack, W, R>(w, x, nb, b, (b / 2) % 2 == 0 ? a0 : a1);
  #pragma GCC unroll 8
  for (size_t i = 0; i < W * R; ++i) out[i] = hsum(_mm256_add_ps(a0[i], a1[i]));
}

// The fp16 scales of blocks b..b+7 as eight 16-bit lanes. Any block type: eight loads and inserts.
template <class Block>
TH_VNNI_INLINE __m128i scales8(const Block* w) {
  return _mm_setr_epi16(short(w[0].d), short(w[1].d), short(w[2].d), short(w[3].d), short(w[4].d), short(w[5].d),
                        short(w[6].d), short(w[7].d));
}

// q4_0 blocks are 18 bytes (9 words): blocks 0-3's scales are words 0, 9, 18, 27 of the 64 bytes from
// w, blocks 4-7's the same words of the 64 bytes from w + 4; one word permutation of two registers
// gathers each four (AVX-512 BW), where the generic way takes eight loads and inserts, a quarter of
// the one-row kernel's instructions. The loads stay inside the eight blocks (bytes 0-135 of 144).
TH_VNNI_INLINE __m128i scales8_q4_0(const BlockQ4_0* w) {
  const char* p = reinterpret_cast<const char*>(w);
  const size_t four = 4 * sizeof(BlockQ4_0);
  const __m256i first = _mm256_setr_epi16(0, 9, 18, 27, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i second = _mm256_setr_epi16(0, 0, 0, 0, 0, 9, 18, 27, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i low = _mm256_permutex2var_epi16(load256(p), first, load256(p + 32));
  const __m256i high = _mm256_permutex2var_epi16(load256(p + four), second, load256(p + four + 32));
  return _mm256_castsi256_si128(_mm256_blend_epi32(low, high, 0b1100));
}

// The one-row kernel (decode): with the row's scales side by side, eight blocks' weight scales are
// converted and multiplied by theirs in one instruction each, spread to the pairs by permutations.
template <class Block, __m256i (*Unpack)(const Block&), void (*Pair)(const Block&, const Block&, __m256i&, __m256i&),
          __m128i (*Scales8)(const Block*)>
TH_VNNI void dot_pairs_one(const uint8_t* wp, size_t row_bytes, const QRows& x, size_t nb, float* out) {
  if (x.d_stride != 1) return dot_pairs<Block, Unpack, Pair, 1, 1>(wp, row_bytes, x, nb, out);
  const Block* w = reinterpret_cast<const Block*>(wp);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  size_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    prefetch_ahead(w + b, 8 * sizeof(Block));
    const __m256 s8 = _mm256_mul_ps(_mm256_cvtph_ps(Scales8(w + b)), _mm256_loadu_ps(x.d + b));
    #pragma GCC unroll 4
    for (size_t p = 0; p < 4; ++p) {
      __m256i first, last;
      Pair(w[b + 2 * p], w[b + 2 * p + 1], first, last);
      const __m256i lanes = pair_lanes(first, last, x.blocks[b + 2 * p], x.blocks[b + 2 * p + 1]);
      const int j = int(2 * p);
      const __m256 s = _mm256_permutevar8x32_ps(s8, _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1));
      acc[p % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), s, acc[p % 2]);
    }
  }
  const Block* const rows[1] = {w};
  for (; b + 2 <= nb; b += 2) pair_vnni<Block, Pair, 1, 1>(rows, x, nb, b, &acc[(b / 2) % 2]);
  if (b < nb) block_vnni<Block, Unpack, 1, 1>(rows, x, nb, b, &acc[(b / 2) % 2]);
  out[0] = hsum(_mm256_add_ps(acc[0], acc[1]));
}

template <class Block, __m256i (*Unpack)(const Block&), void (*Pair)(const Block&, const Block&, __m256i&, __m256i&),
          __m128i (*Scales8)(const Block*)>
TypeKernels<QRows> pair_kernels(int bias_k) {
  TypeKernels<QRows> k;
  k.one = dot_pairs_one<Block, Unpack, Pair, Scales8>;
  k.two = dot_pairs<Block, Unpack, Pair, 1, 2>;
  k.three = dot_pairs<Block, Unpack, Pair, 1, 3>;
  k.four = dot_pairs<Block, Unpack, Pair, 1, 4>;
  k.tile = dot_pairs<Block, Unpack, Pair, 2, 4>;
  k.tile_rows = 2;
  k.bias_k = bias_k;
  k.layout = QLayout::pairs;
  return k;
}

struct VnniDot {
  TH_VNNI_INLINE static __m256i lanes(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  }
  TH_VNNI_INLINE static __m256i lanes(__m256i bias, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(bias, u, s);
  }
};

// The float kernels: AVX2's arithmetic, with 32 registers for a tile of two weight rows.
template <class Wt, size_t W, size_t R>
TH_VNNI void dot_float(const uint8_t* w, size_t row_bytes, const FRows& x, size_t n, float* out) {
  float_tile<Wt, W, R>(w, row_bytes, x, n, out);
}

template <class Wt>
TypeKernels<FRows> float_kernels() {
  return tile_kernels<FRows>(dot_float<Wt, 1, 1>, dot_float<Wt, 1, 2>, dot_float<Wt, 1, 3>, dot_float<Wt, 1, 4>,
                             dot_float<Wt, 2, 4>, 2);
}

}  // namespace

const KernelSet* avx512vnni_set() {
  static const KernelSet* set = []() -> const KernelSet* {
    if (avx2_set() == nullptr || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vnni"))
      return nullptr;
    static const KernelSet s{"avx512vnni",
                             quantize_avx2,
                             float_kernels<F32Weights>(),
                             float_kernels<F16Weights>(),
                             pair_kernels<BlockQ8_0, unsigned_q8_0, pair_q8_0, scales8<BlockQ8_0>>(128),
                             pair_kernels<BlockQ4_0, unsigned_q4_0, pair_q4_0, scales8_q4_0>(8),
                             q4_K_kernels<VnniDot>(),
                             q6_K_kernels<VnniDot>()};
    return &s;
  }();
  return set;
}

}  // namespace tokenhost::matmul_detail

#else

namespace tokenhost::matmul_detail {
const KernelSet* avx512vnni_set() { return nullptr; }
}  // namespace tokenhost::matmul_detail

#endif
