// The avx512 set's q8_0 and q4_0 kernels: AVX-512 VNNI on 512-bit registers.
//
// The weights become unsigned by an offset K (q8_0: w + 128, by flipping the sign bit; q4_0: the
// nibble itself, w + 8) and `vpdpbusd` multiplies them by the signed activation bytes, each lane
// starting at the activations' bias (-K times the sum of its bytes): the lanes hold each block's exact
// dot product. The float work then runs 16 blocks at a time, one lane per block (see QBlock's 512-bit
// layouts): acc = fma(float(dots), dw * dx, acc) per group of 16 blocks, the lanes summed at the end.
// Two families of kernels compute exactly this:
//
//   direct (QLayout::quads): one row; reads the weights as they are, four blocks per register (the
//     first 16 bytes of each block in one, the last 16 in another), and reduces each block's four
//     lanes to one; decode and products of fewer than four rows.
//   packed (QLayout::groups): read weights repacked per product (PackedKernels) so that one register
//     holds four bytes of each of 16 blocks: eight vpdpbusd per group and output, no reduction, the
//     weight registers shared by four activation rows; prefill and large batches.
#include "runtime/matmul_kernels.hpp"

#if defined(__x86_64__)
#include <algorithm>

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

TH_512_INLINE __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
TH_512_INLINE __m512i load512(const void* p) { return _mm512_load_si512(p); }

TH_512_INLINE float hsum512(__m512 a) {
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}

// Bytes [0, n) of a mask over 64 bytes.
TH_512_INLINE __mmask64 first_bytes(size_t n) { return n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1; }

// ---- the weight types ----------------------------------------------------------------------------

// 16 bytes at p(m) for m < count (1..4) in 128-bit lane m, zeros in the others.
template <class Bytes>
TH_512_INLINE __m512i gather_quarters(Bytes p, size_t count) {
  __m512i v = _mm512_zextsi128_si512(load128(p(0)));
  if (count > 1) v = _mm512_inserti32x4(v, load128(p(1)), 1);
  if (count > 2) v = _mm512_inserti32x4(v, load128(p(2)), 2);
  if (count > 3) v = _mm512_inserti32x4(v, load128(p(3)), 3);
  return v;
}

// Four blocks' unsigned weights: elements 0-15 of block m in 128-bit lane m of first, 16-31 of last.
struct QuadWeights {
  __m512i first, last;
};

struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr int bias_k = 128;
  // Each block's 32 bytes in one load; two quadword permutations sort the halves.
  TH_512_INLINE static QuadWeights quad(const BlockQ8_0* w, size_t count) {
    const auto block = [w](size_t m) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[m].q)); };
    __m512i pair01 = _mm512_zextsi256_si512(block(0)), pair23 = _mm512_setzero_si512();
    if (count > 1) pair01 = _mm512_inserti64x4(pair01, block(1), 1);
    if (count > 2) pair23 = _mm512_zextsi256_si512(block(2));
    if (count > 3) pair23 = _mm512_inserti64x4(pair23, block(3), 1);
    const __m512i firsts = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), lasts = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    return {_mm512_xor_si512(_mm512_permutex2var_epi64(pair01, firsts, pair23), flip),
            _mm512_xor_si512(_mm512_permutex2var_epi64(pair01, lasts, pair23), flip)};
  }
};

struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr int bias_k = 8;
  TH_512_INLINE static QuadWeights quad(const BlockQ4_0* w, size_t count) {
    const __m512i packed = gather_quarters([w](size_t m) { return w[m].q; }, count);
    const __m512i low = _mm512_set1_epi8(0x0F);
    return {_mm512_and_si512(packed, low), _mm512_and_si512(_mm512_srli_epi16(packed, 4), low)};
  }
};

// The fp16 scales of the blocks of a group from w (present of them, 1..16), in lane order (lane 4m+q:
// block 4q+m), zeros for missing blocks: per quad, one word permutation of the bytes its blocks span,
// read with masks that stop at their end, merged into the quad's lanes.
template <class Block>
TH_512_INLINE __m512 group_scales(const Block* w, size_t present) {
  constexpr short words = sizeof(Block) / 2;  // a block's stride in 16-bit words; its scale is word 0
  static_assert(sizeof(Block) % 2 == 0 && 3 * words < 64, "a quad's scales within 128 bytes");
  constexpr short w1 = words, w2 = 2 * words, w3 = 3 * words;  // lane 4m + q takes word `words` * m
  const __m512i index = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, w3, w3, w3, w3, w2, w2, w2, w2,
                                         w1, w1, w1, w1, 0, 0, 0, 0);
  __m512i picked = _mm512_setzero_si512();
  #pragma GCC unroll 4
  for (size_t q = 0; q < 4; ++q) {
    if (4 * q >= present) break;
    const size_t bytes = std::min<size_t>(4, present - 4 * q) * sizeof(Block);
    const char* p = reinterpret_cast<const char*>(w + 4 * q);
    const __m512i low = _mm512_maskz_loadu_epi8(first_bytes(bytes), p);
    const __m512i high = 3 * words < 32 || bytes <= 64 ? _mm512_setzero_si512()
                                                       : _mm512_maskz_loadu_epi8(first_bytes(bytes - 64), p + 64);
    picked = _mm512_mask_mov_epi16(picked, __mmask32(0x1111u << q), _mm512_permutex2var_epi16(low, index, high));
  }
  return _mm512_cvtph_ps(_mm512_castsi512_si256(picked));
}

// acc += float(dots) * (dw * dx): the float step of every kernel, per output and group.
TH_512_INLINE __m512 scale_add(__m512i dots, __m512 dw, __m512 dx, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(dw, dx), acc);
}

// ---- direct kernels ------------------------------------------------------------------------------

// Folds of lanes: fold32(a, b) in each 128-bit lane [a0 + a2, b0 + b2, a1 + a3, b1 + b3]; fold64 of two
// such, [x0 + x2, x1 + x3, y0 + y2, y1 + y3]. fold64(fold32(Q0, Q1), fold32(Q2, Q3)) turns four quads'
// lanes (lane 4m + j of Q_q: block 4q + m's partial j) into one lane per block, lane 4m + q.
TH_512_INLINE __m512i fold32(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
TH_512_INLINE __m512i fold64(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

// The group of blocks g..g+15 (present of them) of a weight row against an activation row, added to
// acc. The quads' lanes are folded as they come.
template <class Type, bool prefetch>
TH_512_INLINE __m512 direct_group(const typename Type::Block* w, const QRows& x, size_t g, size_t present, __m512 acc) {
  __m512i folded[2];  // fold32 of quads 0 and 1, of quads 2 and 3
  #pragma GCC unroll 4
  for (size_t q = 0; q < 4; ++q) {
    const size_t count = 4 * q < present ? std::min<size_t>(4, present - 4 * q) : 0;
    __m512i lanes = _mm512_setzero_si512();
    if (count) {
      if (prefetch) prefetch_ahead(w + g + 4 * q, 4 * sizeof(typename Type::Block));
      const QuadWeights qw = Type::quad(w + g + 4 * q, count);
      const QuadBlock& xq = *reinterpret_cast<const QuadBlock*>(x.blocks + g + 4 * q);
      lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(load512(xq.bias), qw.first, load512(xq.first)), qw.last,
                                  load512(xq.last));
    }
    folded[q / 2] = q % 2 == 0 ? lanes : fold32(folded[q / 2], lanes);
  }
  return scale_add(fold64(folded[0], folded[1]), group_scales(w + g, present), _mm512_loadu_ps(x.d + g), acc);
}

// out[0] = dot(weight row, activation row) over nb blocks, prefetching the weights.
template <class Type>
void dot_direct(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  using Block = typename Type::Block;
  const Block* w = reinterpret_cast<const Block*>(wp);
  __m512 acc = _mm512_setzero_ps();
  size_t g = 0;
  for (; g + kGroup <= nb; g += kGroup) acc = direct_group<Type, true>(w, x, g, kGroup, acc);
  if (g < nb) acc = direct_group<Type, false>(w, x, g, nb - g, acc);
  out[0] = hsum512(acc);
}

// ---- packed kernels ------------------------------------------------------------------------------

// A repacked row: per group of 16 blocks, eight 64-byte chunks of unsigned weights (chunk j, lane L:
// elements 4j..4j+3 of the lane's block) and the 16 scales as floats, in lane order.
struct PackedGroup {
  uint8_t chunk[8][64];
  float dw[16];
};
static_assert(sizeof(PackedGroup) == 576, "a packed group is 9 cache lines");
size_t packed_row_bytes(size_t nb) { return group_blocks(nb) / kGroup * sizeof(PackedGroup); }

// Transposes the 4 x 4 matrices of 32-bit lanes in each 128-bit lane of v[0..3]: lane j of v[q] goes
// to lane q of v[j]. Four quads' registers (lane 4m + j: block 4q + m's 4-byte chunk j) become four
// chunks in lane order (lane 4m + q: block 4q + m).
TH_512_INLINE void transpose_quads(__m512i* v) {
  const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
  v[0] = _mm512_unpacklo_epi64(t0, t2);
  v[1] = _mm512_unpackhi_epi64(t0, t2);
  v[2] = _mm512_unpacklo_epi64(t1, t3);
  v[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Each group: its four quads as the direct kernels read them, transposed into chunks.
template <class Type>
void repack(const uint8_t* src, size_t src_row_bytes, size_t rows, size_t nb, uint8_t* dst) {
  using Block = typename Type::Block;
  for (size_t r = 0; r < rows; ++r) {
    const Block* row = reinterpret_cast<const Block*>(src + r * src_row_bytes);
    PackedGroup* out = reinterpret_cast<PackedGroup*>(dst + r * packed_row_bytes(nb));
    for (size_t g = 0; g < nb; g += kGroup, ++out) {
      const size_t present = std::min(kGroup, nb - g);
      prefetch_ahead(row + g, present * sizeof(Block));  // the repacking streams the weights from memory
      __m512i first[4], last[4];
      for (size_t q = 0; q < 4; ++q) {
        const size_t count = 4 * q < present ? std::min<size_t>(4, present - 4 * q) : 0;
        const QuadWeights quad = count ? Type::quad(row + g + 4 * q, count) : QuadWeights{};
        first[q] = quad.first;
        last[q] = quad.last;
      }
      transpose_quads(first);
      transpose_quads(last);
      for (size_t j = 0; j < 4; ++j) {
        _mm512_store_si512(out->chunk[j], first[j]);
        _mm512_store_si512(out->chunk[4 + j], last[j]);
      }
      _mm512_store_ps(out->dw, group_scales(row + g, present));
    }
  }
}

template <size_t W, size_t R>
void dot_packed(const uint8_t* wp, size_t row_bytes, const QRows& x, size_t nb, float* out) {
  const size_t stride = group_blocks(nb), groups = stride / kGroup;
  __m512 acc[W * R];
  #pragma GCC unroll 8
  for (size_t i = 0; i < W * R; ++i) acc[i] = _mm512_setzero_ps();
  for (size_t g = 0; g < groups; ++g) {
    const PackedGroup* w[W];
    #pragma GCC unroll 8
    for (size_t i = 0; i < W; ++i) w[i] = reinterpret_cast<const PackedGroup*>(wp + i * row_bytes) + g;
    const GroupBlock* xg[R];
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) xg[k] = reinterpret_cast<const GroupBlock*>(x.blocks + k * stride) + g;
    __m512i dots[W * R];
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k)
      #pragma GCC unroll 8
      for (size_t i = 0; i < W; ++i) dots[i * R + k] = load512(xg[k]->bias);
    #pragma GCC unroll 8
    for (size_t j = 0; j < 8; ++j) {
      __m512i wj[W];
      #pragma GCC unroll 8
      for (size_t i = 0; i < W; ++i) wj[i] = load512(w[i]->chunk[j]);
      #pragma GCC unroll 8
      for (size_t k = 0; k < R; ++k) {
        const __m512i xj = load512(xg[k]->chunk[j]);
        #pragma GCC unroll 8
        for (size_t i = 0; i < W; ++i) dots[i * R + k] = _mm512_dpbusd_epi32(dots[i * R + k], wj[i], xj);
      }
    }
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) {
      const __m512 dx = _mm512_load_ps(xg[k]->d);
      #pragma GCC unroll 8
      for (size_t i = 0; i < W; ++i)
        acc[i * R + k] = scale_add(dots[i * R + k], _mm512_load_ps(w[i]->dw), dx, acc[i * R + k]);
    }
  }
  #pragma GCC unroll 8
  for (size_t i = 0; i < W * R; ++i) out[i] = hsum512(acc[i]);
}

// Products of at least this many activation rows repack their weights (a pass over them per product,
// in L2-sized blocks): from one four-row tile on, the packed tiles save more than that (q8_0 weights
// streamed from memory, one core of Zen 4: 4 rows 34 against 33 GMAC/s, 8 rows 55 against 48, 64 rows
// 110 against 80). Fewer rows take the one-row kernel, which reads the weights as they are.
constexpr size_t kPackedMinRows = 4;

template <class Type>
TypeKernels<QRows> kernels() {
  static const PackedKernels packed{kPackedMinRows, packed_row_bytes, repack<Type>,
                                    dot_packed<1, 1>, dot_packed<1, 4>, dot_packed<2, 4>, 2};
  TypeKernels<QRows> k;  // fewer than kPackedMinRows rows: the direct kernel row by row
  k.one = dot_direct<Type>;
  k.four = [](const uint8_t* w, size_t row_bytes, const QRows& x, size_t nb, float* out) {
    for (size_t r = 0; r < 4; ++r) {
      const QRows row{x.blocks + r * group_blocks(nb), x.d + r * group_blocks(nb), nullptr, 1};
      dot_direct<Type>(w, row_bytes, row, nb, out + r);
    }
  };
  k.bias_k = Type::bias_k;
  k.layout = QLayout::quads;
  k.packed = &packed;
  return k;
}

}  // namespace

TypeKernels<QRows> avx512_q8_0_kernels() { return kernels<Q8_0>(); }
TypeKernels<QRows> avx512_q4_0_kernels() { return kernels<Q4_0>(); }

}  // namespace tokenhost::matmul_detail

#pragma GCC pop_options

#else

namespace tokenhost::matmul_detail {
TypeKernels<QRows> avx512_q8_0_kernels() { return {}; }
TypeKernels<QRows> avx512_q4_0_kernels() { return {}; }
}  // namespace tokenhost::matmul_detail

#endif
