// Dense products of a weight matrix with a batch of activation rows, on every core, with SIMD dot
// products where the CPU has them (AVX2/FMA/F16C, picked at run time) and portable loops otherwise.
//   f32, f16 weights: f32 activations;
//   q8_0, q4_0 weights: activations quantized to 8 bits per 32-element block once per product, integer
//                       dot products (as llama.cpp does);
//   other types: each weight row dequantized, then an f32 dot product.
#pragma once

#include <cstddef>

#include "runtime/model_weights.hpp"

namespace tokenhost {

// y[r][o] = sum_c w[o][c] * x[r][c] for r < n_rows: x is [n_rows][w.cols], y is [n_rows][w.rows].
void matmul(const WeightView& w, const float* x, size_t n_rows, float* y);

// Which kernels this CPU runs: "avx2" or "portable".
const char* matmul_kernels();

}  // namespace tokenhost
