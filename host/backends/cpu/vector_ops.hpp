// The elementwise math of a forward pass (RMSNorm, SwiGLU's gating, residual adds) on rows of f32, with
// SIMD where the CPU has it. Every element's result depends on its own inputs (and, for rmsnorm, on its
// row) only, never on where it lies in the array or how long the array is: the vector bodies and the
// tails compute the same function, so that a row's results do not depend on the batch around it (batch
// invariance, as for matmul).
//
// The SIMD level follows the matmul kernel set in use (backends/cpu/matmul.hpp): portable loops when it is
// "portable", AVX2 + FMA otherwise. Different levels may round differently (the exponential of the
// portable level is std::exp, the AVX2 one a polynomial within 2 ulp of the exact value).
#pragma once

#include <cstddef>

namespace tokenhost::vec {

// out[i] = x[i] * s * w[i] with s = 1 / sqrt(mean of x[i]^2 + eps), the mean summed in double.
// out may be x.
void rmsnorm(const float* x, const float* w, float eps, float* out, size_t n);

// g[i] = silu(g[i]) * u[i], silu(v) = v / (1 + exp(-v)).
void silu_mul(float* g, const float* u, size_t n);

// x[i] += y[i].
void add(float* x, const float* y, size_t n);

// The largest x[i] (n > 0), and the sum of x[i] in double (summed in lanes, then across them): a pass
// over a vocabulary's logits each, for the sampler.
float max(const float* x, size_t n);
double sum(const float* x, size_t n);

// exp(x[i]) for i < n into out (out may be x): the exponential silu_mul uses, for its tests. x is
// clamped to [-87.3, 88.3] first, so that the result is always a finite normal float.
void exp(const float* x, float* out, size_t n);

}  // namespace tokenhost::vec
