// Dense products of a weight matrix with a batch of activation rows, on every core, with SIMD dot
// products where the CPU has them (picked at run time) and portable loops otherwise.
//   f32, f16 weights: f32 activations;
//   q8_0, q4_0, q4_K, q6_K weights: activations quantized to 8 bits per 32-element block once per
//                       product, integer dot products block by block (as llama.cpp does);
//   other types (bf16): weight rows dequantized to f32 a block at a time, then f32 dot products.
// Each output is one dot product summed in an order fixed by the kernel set alone: a row's results
// do not depend on which other rows share its product (batch invariance).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/model_weights.hpp"

namespace tokenhost {

// y[r][o] = sum_c w[o][c] * x[r][c] for r < n_rows: x is [n_rows][w.cols], y is [n_rows][w.rows].
void matmul(const WeightView& w, const float* x, size_t n_rows, float* y);

// A weight and where its products go ([n_rows][w.rows]), for products that share their input.
struct MatmulOutput {
  const WeightView& w;
  float* y;
};

// The products of several weights with the same x (Q, K and V; gate and up): the results of one
// matmul each, but for weights of one type and width (quantized, f32 or f16) the activations are
// prepared once and the compute pool is started and joined once for all of them. Others (mixed
// types, bf16) run one after the other.
void matmul(std::initializer_list<MatmulOutput> outputs, const float* x, size_t n_rows);

// One group of a grouped product: activation rows [row0, row0 + n_rows) through weights[j] for each of
// the call's products j (an MoE expert's gate and up; its down).
struct MatmulGroup {
  const WeightView* weights;  // [n_products]; product j's weights have the same rows in every group
  size_t row0, n_rows;
};

// y[j][r] = groups[g].weights[j] . x[r] for every row r of every group g: x is [rows][cols], y[j] is
// [rows][rows_j], where rows is the groups' end. Each output as matmul computes it (a row's results do
// not depend on the other rows, nor on the grouping); for weights of one type and width the activations
// are quantized once for all the groups and the compute pool is started once. Empty groups' weights are
// not read.
void grouped_matmul(const MatmulGroup* groups, size_t n_groups, size_t n_products, const float* x, float* const* y);

// Packs weight w, once, for the kernel set in use when that set has a packed layout for w's type
// (avx512: q8_0 and q4_0), into memory that the returned handle owns, and records it in w.packed*:
// products of w under that set then read the packed rows, whatever their number of activation rows,
// instead of the weights as they are (or blocks of them packed each time), with the same results bit
// for bit. Returns null and changes nothing for other types and sets.
std::shared_ptr<void> pack_weight(WeightView& w);
// The same in two steps, for copies that share one allocation (a model's, in huge pages): the bytes
// w's packed copy takes (0 where pack_weight would return null), then the packing into `bytes` bytes
// at memory (64-byte aligned), which the caller owns and keeps while w is used. Throws
// std::logic_error when bytes is not packed_size(w) under the kernel set now in use.
size_t packed_size(const WeightView& w);
void pack_weight_into(WeightView& w, void* memory, size_t bytes);

// The kernel sets this CPU runs, preferred first: of "avx512" (AVX-512 VNNI on 512-bit registers,
// first on AMD CPUs), "avx512vnni" (the same on 256-bit registers, first on Intel ones), "avx2" and
// "portable".
std::vector<std::string> matmul_kernel_sets();

// The set products use: the first of matmul_kernel_sets(), or the one $TOKENHOST_KERNELS names
// ("portable" when $TOKENHOST_PORTABLE_KERNELS is set).
const char* matmul_kernels();

// Products use the named set from now on (tests and benchmarks; not while a product runs). Throws
// std::invalid_argument, naming it and the sets there are, when this CPU does not run it.
void use_matmul_kernels(std::string_view name);

}  // namespace tokenhost
