// The avx512 set's q8_0 and q4_0 kernels: AVX-512 VNNI on 512-bit registers.
//
// The weights become unsigned by an offset K (q8_0: w + 128, by flipping the sign bit; q4_0: the
// nibble itself, w + 8) and `vpdpbusd` multiplies them by the signed activation bytes, each lane
// starting at the activations' bias (-K times the sum of its bytes): the lanes hold each block's exact
// dot product. The float work then runs 16 blocks at a time, one lane per block (see QBlock's 512-bit
// layouts): acc = fma(float(dots), dw * dx, acc) per group of 16 blocks, the lanes summed at the end.
// Two families of kernels compute exactly this:
//
//   direct (QLayout::quads): reads the weights as they are, four blocks per register (the first 16
//     bytes of each block in one, the last 16 in another), and reduces each block's four lanes to one;
//     products of fewer than packed_min_rows rows of weights not packed at load.
//   packed (QLayout::groups): read weights packed at load, or repacked per product (PackedKernels), so
//     that one register holds four bytes of each of 16 blocks: eight vpdpbusd per group and output, no
//     reduction, the weight registers shared by up to eight activation rows; everything else.
#include "backends/cpu/matmul_kernels.hpp"

#if defined(__x86_64__)
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/cpu/matmul_avx512_target.hpp"  // last: what follows is 512-bit code

namespace tokenhost::matmul_detail {
namespace {

TH_512_INLINE __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
TH_512_INLINE __m512i load512(const void* p) { return _mm512_load_si512(p); }

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

// Each type: its blocks, K, the direct kernels' quads, and its packed form: `stored` registers per
// group of 16 blocks, each a chunk-major 4-byte column per block, of which raw() makes one quad's share
// (128-bit lane m: block m of the quad) and unpack() the eight unsigned weight chunks.
struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr int bias_k = 128;
  static constexpr size_t stored = 8;  // the eight chunks, unsigned
  static constexpr size_t packed_min_rows = 8;  // see kernels()
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
  TH_512_INLINE static void raw(const BlockQ8_0* w, size_t count, __m512i* out) {
    const QuadWeights q = quad(w, count);
    out[0] = q.first;  // chunks 0-3
    out[1] = q.last;   // chunks 4-7
  }
  TH_512_INLINE static void unpack(const __m512i* stored_regs, __m512i* chunks) {
    #pragma GCC unroll 8
    for (size_t j = 0; j < 8; ++j) chunks[j] = stored_regs[j];
  }
};

struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr int bias_k = 8;
  static constexpr size_t stored = 4;  // packed bytes: chunk c's low nibbles are elements 4c.., high 16+4c..
  static constexpr size_t packed_min_rows = 8;  // see kernels()
  TH_512_INLINE static QuadWeights quad(const BlockQ4_0* w, size_t count) {
    const __m512i packed = gather_quarters([w](size_t m) { return w[m].q; }, count);
    const __m512i low = _mm512_set1_epi8(0x0F);
    return {_mm512_and_si512(packed, low), _mm512_and_si512(_mm512_srli_epi16(packed, 4), low)};
  }
  TH_512_INLINE static void raw(const BlockQ4_0* w, size_t count, __m512i* out) {
    out[0] = gather_quarters([w](size_t m) { return w[m].q; }, count);
  }
  TH_512_INLINE static void unpack(const __m512i* stored_regs, __m512i* chunks) {
    const __m512i low = _mm512_set1_epi8(0x0F);
    #pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      chunks[c] = _mm512_and_si512(stored_regs[c], low);
      chunks[c + 4] = _mm512_and_si512(_mm512_srli_epi16(stored_regs[c], 4), low);
    }
  }
};

// The fp16 scales of the blocks of a group from w (present of them, 1..16), lane L block L's, zeros for
// missing blocks: per quad, one word permutation of the bytes its blocks span, read with masks that
// stop at their end, merged into the quad's four lanes.
template <class Block>
TH_512_INLINE __m256i group_scale_words(const Block* w, size_t present) {
  constexpr short words = sizeof(Block) / 2;  // a block's stride in 16-bit words; its scale is word 0
  static_assert(sizeof(Block) % 2 == 0 && 3 * words < 64, "a quad's scales within 128 bytes");
  constexpr short w1 = words, w2 = 2 * words, w3 = 3 * words;  // lane 4q + m takes word `words` * m
  const __m512i index = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, w3, w2, w1, 0, w3, w2, w1, 0,
                                         w3, w2, w1, 0, w3, w2, w1, 0);
  __m512i picked = _mm512_setzero_si512();
  #pragma GCC unroll 4
  for (size_t q = 0; q < 4; ++q) {
    if (4 * q >= present) break;
    const size_t bytes = std::min<size_t>(4, present - 4 * q) * sizeof(Block);
    const char* p = reinterpret_cast<const char*>(w + 4 * q);
    const __m512i low = _mm512_maskz_loadu_epi8(first_bytes(bytes), p);
    const __m512i high = 3 * words < 32 || bytes <= 64 ? _mm512_setzero_si512()
                                                       : _mm512_maskz_loadu_epi8(first_bytes(bytes - 64), p + 64);
    picked = _mm512_mask_mov_epi16(picked, __mmask32(0xFu << (4 * q)), _mm512_permutex2var_epi16(low, index, high));
  }
  return _mm512_castsi512_si256(picked);
}

// acc += float(dots) * (dw * dx): the float step of every kernel, per output and group.
TH_512_INLINE __m512 scale_add(__m512i dots, __m512 dw, __m512 dx, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(dw, dx), acc);
}

// Lane 4m + q to lane 4q + m: the 4 x 4 transposition of a register's 32-bit lanes (its own inverse).
TH_512_INLINE __m512i transpose_lanes(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
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

// The group of blocks g..g+15 (present of them) of a weight row against R activation rows (row r's
// blocks and scales `stride` blocks after row 0's), added to acc[r]. The quads' lanes are folded as
// they come, then put in block order. The weights' quads and scales are made once for the R rows, and
// each row's arithmetic is the same op for op whatever R is: a row's result does not depend on the
// rows beside it.
template <class Type, bool prefetch, size_t R>
TH_512_INLINE void direct_group(const typename Type::Block* w, const QRows& x, size_t stride, size_t g,
                                size_t present, __m512* acc) {
  __m512i folded[R][2];  // per row: fold32 of quads 0 and 1, of quads 2 and 3
  #pragma GCC unroll 4
  for (size_t q = 0; q < 4; ++q) {
    const size_t count = 4 * q < present ? std::min<size_t>(4, present - 4 * q) : 0;
    __m512i lanes[R];
    #pragma GCC unroll 4
    for (size_t r = 0; r < R; ++r) lanes[r] = _mm512_setzero_si512();
    if (count) {
      if (prefetch) prefetch_ahead(w + g + 4 * q, 4 * sizeof(typename Type::Block));
      const QuadWeights qw = Type::quad(w + g + 4 * q, count);
      #pragma GCC unroll 4
      for (size_t r = 0; r < R; ++r) {
        const QuadBlock& xq = *reinterpret_cast<const QuadBlock*>(x.blocks + r * stride + g + 4 * q);
        lanes[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(load512(xq.bias), qw.first, load512(xq.first)), qw.last,
                                       load512(xq.last));
      }
    }
    #pragma GCC unroll 4
    for (size_t r = 0; r < R; ++r) folded[r][q / 2] = q % 2 == 0 ? lanes[r] : fold32(folded[r][q / 2], lanes[r]);
  }
  const __m512 dw = _mm512_cvtph_ps(group_scale_words(w + g, present));
  #pragma GCC unroll 4
  for (size_t r = 0; r < R; ++r)
    acc[r] = scale_add(transpose_lanes(fold64(folded[r][0], folded[r][1])), dw, _mm512_loadu_ps(x.d + r * stride + g),
                       acc[r]);
}

// out[r] = dot(weight row, activation row r) over nb blocks for r < R (rows group_blocks(nb) blocks
// apart), prefetching the weights: R = 1 for decode, 2 and 3 for products of as many rows, which read
// and prepare each weight block once for all of them.
template <class Type, size_t R>
void dot_direct(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  using Block = typename Type::Block;
  const Block* w = reinterpret_cast<const Block*>(wp);
  const size_t stride = group_blocks(nb);
  __m512 acc[R];
  #pragma GCC unroll 4
  for (size_t r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  size_t g = 0;
  for (; g + kGroup <= nb; g += kGroup) direct_group<Type, true, R>(w, x, stride, g, kGroup, acc);
  if (g < nb) direct_group<Type, false, R>(w, x, stride, g, nb - g, acc);
  #pragma GCC unroll 4
  for (size_t r = 0; r < R; ++r) out[r] = hsum512(acc[r]);
}

// ---- packed kernels ------------------------------------------------------------------------------

// A packed row of nb blocks: groups of 16 blocks, the last one half wide (8 blocks) when at most 8 are
// left; each group `stored` registers of 64 bytes (32 for a half group: lanes 0-7), register r's lane
// L the 4-byte column r of block L of the group; then every block's fp16 scale (groups padded with
// zeros); the row padded to a cache line. As many bytes as the blocks themselves, but for that padding.
struct PackedShape {
  size_t groups, full, chunk_bytes, scale_offset, row_bytes;
};
template <class Type>
PackedShape packed_shape(size_t nb) {
  const size_t rest = nb % kGroup, full = nb / kGroup + (rest > kGroup / 2 ? 1 : 0);
  const size_t half = rest > 0 && rest <= kGroup / 2 ? 1 : 0;
  const size_t chunk_bytes = (full * 64 + half * 32) * Type::stored;
  const size_t padded = full * kGroup + half * kGroup / 2;
  return {full + half, full, chunk_bytes, chunk_bytes, (chunk_bytes + 2 * padded + 63) / 64 * 64};
}
template <class Type>
size_t packed_row_bytes(size_t nb) {
  return packed_shape<Type>(nb).row_bytes;
}

// Transposes the 4 x 4 matrices of 32-bit lanes in each 128-bit lane of v[0..3]: lane j of v[q] goes
// to lane q of v[j]. Four quads' registers (lane 4m + j: block 4q + m's 4-byte column j) become four
// columns with lane 4m + q holding block 4q + m.
TH_512_INLINE void transpose_quads(__m512i* v) {
  const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
  v[0] = _mm512_unpacklo_epi64(t0, t2);
  v[1] = _mm512_unpackhi_epi64(t0, t2);
  v[2] = _mm512_unpacklo_epi64(t1, t3);
  v[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Packs rows [0, rows) of weights (src_row_bytes apart, nb blocks each) into dst, packed_row_bytes
// apart: per group, its quads as raw() makes them, transposed into columns and put in block order.
template <class Type>
void repack(const uint8_t* src, size_t src_row_bytes, size_t rows, size_t nb, uint8_t* dst) {
  using Block = typename Type::Block;
  constexpr size_t per_quad = Type::stored / 4;
  const PackedShape shape = packed_shape<Type>(nb);
  for (size_t r = 0; r < rows; ++r) {
    const Block* row = reinterpret_cast<const Block*>(src + r * src_row_bytes);
    uint8_t* out = dst + r * shape.row_bytes;
    uint8_t* chunks = out;
    for (size_t gi = 0; gi < shape.groups; ++gi) {
      const size_t g = gi * kGroup, present = std::min(kGroup, nb - g);
      const bool half = gi >= shape.full;
      prefetch_ahead(row + g, present * sizeof(Block));  // the repacking streams the weights from memory
      __m512i quads[4][per_quad];  // quads[q][i]: register i of quad q
      for (size_t q = 0; q < 4; ++q) {
        const size_t count = 4 * q < present ? std::min<size_t>(4, present - 4 * q) : 0;
        if (count) Type::raw(row + g + 4 * q, count, quads[q]);
        else for (size_t i = 0; i < per_quad; ++i) quads[q][i] = _mm512_setzero_si512();
      }
      for (size_t i = 0; i < per_quad; ++i) {
        __m512i columns[4] = {quads[0][i], quads[1][i], quads[2][i], quads[3][i]};
        transpose_quads(columns);
        for (size_t c = 0; c < 4; ++c) {
          const __m512i v = transpose_lanes(columns[c]);
          if (half) _mm256_store_si256(reinterpret_cast<__m256i*>(chunks), _mm512_castsi512_si256(v));
          else _mm512_store_si512(chunks, v);
          chunks += half ? 32 : 64;
        }
      }
      const __m256i scales = group_scale_words(row + g, present);
      uint8_t* at = out + shape.scale_offset + 2 * g;
      if (half) _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm256_castsi256_si128(scales));
      else _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), scales);
    }
    const size_t used = shape.scale_offset + 2 * (shape.full * kGroup + (shape.groups - shape.full) * kGroup / 2);
    std::memset(out + used, 0, shape.row_bytes - used);
  }
}

// Group gi of a packed weight row (chunks: the group's; scales: the row's) against R activation rows,
// into acc[k]. Half: the row's last, 8-block group.
template <class Type, size_t R, bool Half>
TH_512_INLINE void packed_group(const uint8_t* chunks, const uint8_t* scales, const QRows& x, size_t stride, size_t gi,
                                __m512* acc) {
  const GroupBlock* xg[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) xg[k] = reinterpret_cast<const GroupBlock*>(x.blocks + k * stride) + gi;
  // Per output, P partial sums of its chunks (chunk j into partial j % P), so that one row's eight
  // vpdpbusd are not one chain of dependent instructions; integer sums, so the split changes nothing.
  constexpr size_t P = R >= 4 ? 1 : 4 / R;
  __m512i dots[P][R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) {
    dots[0][k] = load512(xg[k]->bias);
    #pragma GCC unroll 4
    for (size_t p = 1; p < P; ++p) dots[p][k] = _mm512_setzero_si512();
  }
  // Weights packed at load stream from memory (the first activation rows of a product): the group's
  // columns and its scales, which lie apart, each ahead of where they are read.
  prefetch_ahead(chunks, (Half ? 32 : 64) * Type::stored);
  prefetch_ahead(scales + 2 * gi * kGroup, 1);
  __m512i regs[Type::stored], w8[8];
  #pragma GCC unroll 8
  for (size_t c = 0; c < Type::stored; ++c)
    regs[c] = Half ? _mm512_zextsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(chunks + 32 * c)))
                   : load512(chunks + 64 * c);
  Type::unpack(regs, w8);
  #pragma GCC unroll 8
  for (size_t j = 0; j < 8; ++j)
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) dots[j % P][k] = _mm512_dpbusd_epi32(dots[j % P][k], w8[j], load512(xg[k]->chunk[j]));
  const uint8_t* at = scales + 2 * gi * kGroup;
  const __m512 dw = _mm512_cvtph_ps(Half ? _mm256_zextsi128_si256(load128(at))
                                         : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) {
    __m512i sum = dots[0][k];
    #pragma GCC unroll 4
    for (size_t p = 1; p < P; ++p) sum = _mm512_add_epi32(sum, dots[p][k]);
    acc[k] = scale_add(sum, dw, _mm512_load_ps(xg[k]->d), acc[k]);
  }
}

// out[k] = dot(packed weight row, activation row k) for k < R: the row of the given shape, the
// activation rows `stride` blocks apart (both the product's, computed once for all its weight rows).
template <class Type, size_t R>
void dot_packed(const uint8_t* wp, const PackedShape& shape, size_t stride, const QRows& x, float* out) {
  __m512 acc[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) acc[k] = _mm512_setzero_ps();
  const uint8_t* scales = wp + shape.scale_offset;
  size_t gi = 0;
  for (; gi < shape.full; ++gi) packed_group<Type, R, false>(wp + gi * 64 * Type::stored, scales, x, stride, gi, acc);
  if (gi < shape.groups) packed_group<Type, R, true>(wp + gi * 64 * Type::stored, scales, x, stride, gi, acc);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) out[k] = hsum512(acc[k]);
}

// at_once[R]: w_rows packed weight rows against R activation rows, each weight row read once. The R
// rows' activations of a whole row do not stay in L1 for long rows (1.25 bytes an element read: 5 rows
// of 5632 columns, an FFN's down projection, are 35 KiB), and reading them from L2 for every weight row
// halved the products' speed there. So a product whose activations exceed kAtOnceWhole goes a span of
// kAtOnceSpan bytes of them at a time across kAtOnceRows weight rows, their accumulators kept in memory
// between spans: every lane still adds its groups in dot_packed's order, so the results are `one`'s bit
// for bit. Measured on Zen 5 (2 cores, weights from memory, q8_0, 2026-12-07): 5632 columns, 4 / 5 / 8
// rows 90 / 90 / 123 -> 112-145 / 128-158 / 146-195 GMAC/s; spans at 2048 columns (8 rows: 20 KiB) were
// slower than none, and spans of 4-8 KiB or 16 KiB, or 8 weight rows at a time, slower than these.
constexpr size_t kAtOnceWhole = 20 * 1024;
constexpr size_t kAtOnceSpan = 12 * 1024;
constexpr size_t kAtOnceRows = 16;

template <class Type, size_t R>
void rows_packed(const uint8_t* wp, size_t row_bytes, size_t w_rows, const QRows& x, size_t nb, float* y,
                 size_t y_stride) {
  const PackedShape shape = packed_shape<Type>(nb);
  const size_t stride = group_blocks(nb);
  constexpr size_t kTouched = offsetof(GroupBlock, unused);  // bytes of a group the kernels read
  const size_t span = std::max<size_t>(1, kAtOnceSpan / (R * kTouched));
  float out[R];
  if (R * shape.groups * kTouched <= kAtOnceWhole) {
    for (size_t i = 0; i < w_rows; ++i) {
      dot_packed<Type, R>(wp + i * row_bytes, shape, stride, x, out);
      for (size_t k = 0; k < R; ++k) y[k * y_stride + i] = out[k];
    }
    return;
  }
  __m512 acc[kAtOnceRows][R];
  for (size_t r0 = 0; r0 < w_rows; r0 += kAtOnceRows) {
    const size_t rows = std::min(kAtOnceRows, w_rows - r0);
    for (size_t i = 0; i < rows; ++i)
      for (size_t k = 0; k < R; ++k) acc[i][k] = _mm512_setzero_ps();
    for (size_t g0 = 0; g0 < shape.groups; g0 += span) {
      const size_t g1 = std::min(shape.groups, g0 + span), full_end = std::min(g1, shape.full);
      for (size_t i = 0; i < rows; ++i) {
        const uint8_t* w = wp + (r0 + i) * row_bytes;
        __m512 a[R];
        #pragma GCC unroll 8
        for (size_t k = 0; k < R; ++k) a[k] = acc[i][k];
        size_t gi = g0;
        for (; gi < full_end; ++gi)
          packed_group<Type, R, false>(w + gi * 64 * Type::stored, w + shape.scale_offset, x, stride, gi, a);
        if (gi < g1)
          packed_group<Type, R, true>(w + gi * 64 * Type::stored, w + shape.scale_offset, x, stride, gi, a);
        #pragma GCC unroll 8
        for (size_t k = 0; k < R; ++k) acc[i][k] = a[k];
      }
    }
    for (size_t i = 0; i < rows; ++i)
      for (size_t k = 0; k < R; ++k) y[k * y_stride + r0 + i] = hsum512(acc[i][k]);
  }
}

// Weights packed at load take the packed kernels at every row count; weights as they are (a model's
// pack_weights = false) take them, repacked per product in L2-sized blocks, from Type::packed_min_rows
// activation rows on, and below that the direct kernels, which read the weights as they are and
// prepare each block once for up to four rows. Up to 8 rows go through one packed kernel for all of
// them (at_once, one weight row at a time: the weights read once, where a group of four and then the
// rest read them twice; 4 rows so too, rather than the two-row tile, which won only in cache), and
// more rows through it in passes (product() in matmul.cpp), rather than through groups of four rows
// and tiles of two weight rows, or four (a 4 x 4 tile, its accumulators in L1 between groups, measured
// 0.78-0.99x the groups of four at 64 and 512 rows at 2 threads; bench/RESULTS.md has the others tried).
// Measured side by side on Zen 5 (bench_matmul_speed, 2 cores, 5632 x 2048 from memory, 2026-12-07):
// packed at load against direct, 1-4 rows: q8_0 1.05-1.2x, q4_0 1.05-1.2x (in cache 1.2-1.7x); at
// once against four and the rest, 5-8 rows: q8_0 1.25-1.4x, q4_0 1.3x. Repacked per product against
// direct, 4-7 rows: 0.65x at 4 rows, 0.8-0.9x at 5-7, so the direct kernels keep them.
template <class Type>
TypeKernels<QRows> kernels() {
  static const PackedKernels packed = [] {
    PackedKernels p{Type::packed_min_rows, packed_row_bytes<Type>, repack<Type>};
    p.at_once[1] = rows_packed<Type, 1>;
    p.at_once[2] = rows_packed<Type, 2>;
    p.at_once[3] = rows_packed<Type, 3>;
    p.at_once[4] = rows_packed<Type, 4>;
    p.at_once[5] = rows_packed<Type, 5>;
    p.at_once[6] = rows_packed<Type, 6>;
    p.at_once[7] = rows_packed<Type, 7>;
    p.at_once[8] = rows_packed<Type, 8>;
    return p;
  }();
  TypeKernels<QRows> k;  // fewer than packed_min_rows rows: the direct kernels
  k.one = dot_direct<Type, 1>;
  k.two = dot_direct<Type, 2>;
  k.three = dot_direct<Type, 3>;
  k.four = dot_direct<Type, 4>;
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
