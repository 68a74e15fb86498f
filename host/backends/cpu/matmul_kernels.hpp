// The dot-product kernels behind matmul: weight block layouts, the activation layout the integer
// kernels read, and kernel sets (portable loops, AVX2, 256-bit AVX-512 VNNI), each a table of
// functions that one CPU feature level can run.
//
// Every kernel computes a tile of outputs: one or more weight rows against one or four activation
// rows. Each output of a tile is computed with exactly the arithmetic of the one-row kernel of the
// same set (same accumulators, same order), so that a product's results do not depend on how its
// activation rows are grouped (batch invariance). Different sets may round differently.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tokenhost::matmul_detail {

constexpr size_t kBlock = 32;

// ggml's weight blocks.
struct BlockQ8_0 {
  uint16_t d;
  int8_t q[kBlock];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t q[kBlock / 2];  // element j: low nibble of q[j]; element j + 16: high nibble
};
// 256-element super-blocks of 32-element sub-blocks (see model/quant.hpp for the element order).
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // sub-block j's 6-bit scale and min, packed (ggml's get_scale_min_k4)
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];  // one per 16 elements
  uint16_t d;
};
constexpr size_t kSuper = 256;
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
                  sizeof(BlockQ6_K) == 210,
              "ggml block layouts");

// Activation rows quantized to 8 bits per block of 32, consecutive in one buffer: element 32 b + i of
// row k is d[b * d_stride + k] * blocks[k * nb + b].q[i] (the scales are stored block-major, so that
// a tile's rows have theirs side by side). bias is filled for kernels that ask for it
// (TypeKernels::bias_k = K > 0): lane j = -K * (q[4 j] + ... + q[4 j + 3]). A VNNI kernel multiplies
// unsigned weight bytes (the weight plus K) by q four at a time; starting each lane at the bias removes
// the K * q terms, so each lane holds exactly the signed 4-element dot product. sums, for kernels that
// ask for it (TypeKernels::wants_sums), holds each block's d times the sum of its q, laid out as d.
//
// Kernels that ask for pairs (TypeKernels::layout = QLayout::pairs) read each row's blocks 2p and
// 2p + 1 rearranged so that one 32-byte load meets two q4_0 blocks' low nibbles and another their high
// nibbles (see pair_blocks): block 2p's q holds the first 16 q of block 2p then of 2p + 1, block 2p + 1's q the last
// 16 of each; block 2p's bias lanes 0-3 are block 2p's lanes j + j + 4 (each lane now covers q[4 j..
// 4 j + 3] and q[16 + 4 j..16 + 4 j + 3]), lanes 4-7 block 2p + 1's. A last odd block stays as it is.
//
// The 512-bit kernels (QLayout::quads and ::groups) sum each block's products exactly in int32 lanes,
// then scale and add them in float 16 blocks at a time, one float lane per block: lane L of group g
// holds block 16 g + L. Per output row the float work is acc = fma(float(dot of the group's blocks),
// dw * dx, acc) over the groups in order, then a sum of acc's lanes: the same in every kernel of a set
// that reads these layouts, whatever the layout of the activations or of the weights (as they are, or
// packed). Each activation row is padded to group_blocks(nb) blocks; blocks past nb are zeros (scales
// too) and add nothing.
//
// QLayout::quads (kernels that read the weights as they are): the pairs' rearrangement four blocks
// wide. The storage of blocks 4p..4p+3 is one QuadBlock (see to_quad_layout). Scales are row-major:
// row k's scale of block b is d[k * group_blocks(nb) + b] (d_stride 1).
//
// QLayout::groups (kernels that read packed weights, see PackedKernels): the storage of group g, 16
// blocks, is one GroupBlock: chunk j, lane L holds q[4 j..4 j + 3] of block 16 g + L, so that one
// vpdpbusd meets four elements of each of 16 blocks; the lane's bias covers the whole block.
constexpr size_t kGroup = 16;
inline size_t group_blocks(size_t nb) { return (nb + kGroup - 1) / kGroup * kGroup; }

struct alignas(64) QBlock {
  int8_t q[kBlock];
  int32_t bias[8];
};
struct alignas(64) QuadBlock {
  int8_t first[64];   // q[0..16) of blocks 4p, 4p + 1, 4p + 2, 4p + 3
  int8_t last[64];    // q[16..32) of each
  int32_t bias[16];   // lanes 4m..4m + 3: block 4p + m's bias lanes j + (j + 4), as in the pairs
  int32_t unused[16];
};
struct alignas(64) GroupBlock {
  int8_t chunk[8][64];  // chunk j, lane L (4 bytes): q[4 j..4 j + 3] of the group's block L
  int32_t bias[16];     // lane L: the sum of that block's bias lanes
  float d[16];          // lane L: that block's scale
  uint8_t unused[384];
};
static_assert(sizeof(QuadBlock) == 4 * sizeof(QBlock) && sizeof(GroupBlock) == kGroup * sizeof(QBlock),
              "quads and groups are stored in their blocks");
enum class QLayout { blocks, pairs, quads, groups };

struct QRows {
  const QBlock* blocks;
  const float* d;
  const float* sums;
  size_t d_stride;
};

// Float activation rows: row k is x + k * stride.
struct FRows {
  const float* x;
  size_t stride;
};

// The kernels of one weight type. X is a tile's activation rows: FRows for float weights, QRows for
// quantized ones. `n` counts elements (float weights) or blocks (quantized).
//   one:  out[0] = dot(w row, row 0 of x)
//   two, three: out[k] = dot(w row, row k of x) for k < 2 or 3, each exactly as `one` computes it,
//         the weights read and prepared once for the rows (products of 2 or 3 rows, and the rows
//         after the groups of four). Null: `one` row by row.
//   four: out[k] = dot(w row, row k of x) for k < 4
//   tile: out[i * 4 + k] = dot(w row i, row k of x) for i < tile_rows <= kMaxTileRows, k < 4; weight
//         row i starts i * row_bytes after w. Null when the set has no wider tile for this type.
//   at_once[R], R <= kMaxAtOnce (a RowsFn): y[k * y_stride + i] = dot(w row i, row k of x) for
//         i < w_rows, k < R, each exactly as `one` computes it, every weight row read and prepared once
//         for all R rows: a product of R rows takes it instead of groups of four and then the rest,
//         which read the weights twice from 5 rows on (verification of a few drafts, small batches).
//         A product of more rows than kMaxAtOnce takes it in passes of at most that many, where the
//         set has at_once[kMaxAtOnce] and each count below it. Null: groups of four and the rest.
constexpr size_t kMaxTileRows = 4;
constexpr size_t kMaxAtOnce = 8;

template <class X>
struct TypeKernels {
  using Fn = void (*)(const uint8_t* w, size_t row_bytes, const X& x, size_t n, float* out);
  using RowsFn = void (*)(const uint8_t* w, size_t row_bytes, size_t w_rows, const X& x, size_t n, float* y,
                          size_t y_stride);
  Fn one = nullptr;
  Fn two = nullptr;
  Fn three = nullptr;
  Fn four = nullptr;
  Fn tile = nullptr;
  size_t tile_rows = 0;
  RowsFn at_once[kMaxAtOnce + 1] = {};
  int bias_k = 0;            // quantized types: K of QBlock::bias the kernels read, 0 when they read none
  bool wants_sums = false;  // quantized types: whether the kernels read QRows::sums
  QLayout layout = QLayout::blocks;  // quantized types: how the kernels read the blocks (see QBlock)
  // Quantized types: kernels on repacked weights, used for products of at least packed->min_rows
  // activation rows (null: none). Their results are those of the kernels above, bit for bit.
  const struct PackedKernels* packed = nullptr;
};

// The kernels of a type with a tile of tile_rows weight rows.
template <class X>
TypeKernels<X> tile_kernels(typename TypeKernels<X>::Fn one, typename TypeKernels<X>::Fn two,
                            typename TypeKernels<X>::Fn three, typename TypeKernels<X>::Fn four,
                            typename TypeKernels<X>::Fn tile, size_t tile_rows) {
  TypeKernels<X> k;
  k.one = one;
  k.two = two;
  k.three = three;
  k.four = four;
  k.tile = tile;
  k.tile_rows = tile_rows;
  return k;
}

// Kernels that read weights packed into a layout of their own, against activations in QLayout::groups:
// packed once at load (pack_weight in matmul.hpp), or else a block of rows at a time by each product of
// at least min_rows rows and reused by all its activation rows. A packed row takes row_bytes(nb) bytes.
// at_once is as in TypeKernels, on packed rows, with every count from 1 to kMaxAtOnce: a product of
// any number of rows goes through it (more than kMaxAtOnce in passes).
struct PackedKernels {
  size_t min_rows;
  size_t (*row_bytes)(size_t nb);
  // Repacks rows [0, rows) of weights (src_row_bytes apart, nb blocks each) into dst.
  void (*repack)(const uint8_t* src, size_t src_row_bytes, size_t rows, size_t nb, uint8_t* dst);
  TypeKernels<QRows>::RowsFn at_once[kMaxAtOnce + 1] = {};
};

struct KernelSet {
  const char* name;
  // Quantizes nb blocks of one row x into blocks[0..nb) and d[b * d_stride] (the same values in every
  // set: round to nearest, ties to even), with the bias lanes when bias_k is not 0 and the sums at
  // sums[b * d_stride] when sums is not null.
  void (*quantize)(const float* x, size_t nb, int bias_k, QBlock* blocks, float* d, float* sums, size_t d_stride);
  TypeKernels<FRows> f32, f16;
  TypeKernels<QRows> q8_0, q4_0, q4_K, q6_K;  // the K-quants' n counts 32-element blocks too
};

// The sets, each null when this build or this CPU cannot run it.
const KernelSet* portable_set();
const KernelSet* avx2_set();        // AVX2 + FMA + F16C
const KernelSet* avx512vnni_set();  // AVX-512 VL/BW/VNNI on 256-bit registers, + the AVX2 set's needs
const KernelSet* avx512_set();      // the same on 512-bit registers, + AVX-512 DQ
// The avx512 set's q8_0 and q4_0 kernels (matmul_avx512_int8.cpp); call only where it runs.
TypeKernels<QRows> avx512_q8_0_kernels();
TypeKernels<QRows> avx512_q4_0_kernels();

// Shared by the portable set and the SIMD sets' tails: the reference quantizer.
void quantize_portable(const float* x, size_t nb, int bias_k, QBlock* blocks, float* d, float* sums,
                       size_t d_stride);

// Rearranges one row's nb quantized blocks (with their bias lanes) into the pair layout (see QBlock).
void pair_blocks(QBlock* blocks, size_t nb);
// Rearrange one row's group_blocks(nb) blocks, of which the first nb are quantized, into the quad or
// group layout (see QBlock), zeroing the blocks past nb; to_quad_layout also zeroes the row's scales d
// past nb (an array group_blocks(nb) long), to_group_layout moves them into the groups.
void to_quad_layout(QBlock* blocks, float* d, size_t nb);
void to_group_layout(QBlock* blocks, const float* d, size_t nb);

}  // namespace tokenhost::matmul_detail
