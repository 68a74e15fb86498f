#include "backends/cpu/vector_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/matmul.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tokenhost::vec {
namespace {

// ---- portable ------------------------------------------------------------------------------------

void rmsnorm_portable(const float* x, const float* w, float eps, float* out, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

// std::exp on the SIMD levels' range (see exp8).
float exp1(float x) { return std::exp(std::min(std::max(x, -87.3f), 88.3f)); }

void silu_mul_portable(float* g, const float* u, size_t n) {
  for (size_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + exp1(-g[i])) * u[i];
}

void exp_portable(const float* x, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = exp1(x[i]);
}

float max_portable(const float* x, size_t n) { return *std::max_element(x, x + n); }

double sum_portable(const float* x, size_t n) {
  double lanes[4] = {0, 0, 0, 0};  // four chains of additions instead of one
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; ++j) lanes[j] += x[i + j];
  for (; i < n; ++i) lanes[0] += x[i];
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// ---- AVX2 + FMA ----------------------------------------------------------------------------------

#if defined(__x86_64__)
// Compiled for AVX2 + FMA whatever the build flags (lambdas inherit a pragma's target, not a function
// attribute's); called only where the CPU has them.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define TH_VEC_INLINE __attribute__((always_inline)) inline

// e^x = 2^k e^r with k = round(x / ln 2) and r = x - k ln 2 (ln 2 split in two for an exact first
// step), |r| <= ln 2 / 2; e^r by its Taylor series to r^7 (the first term left out is below 6e-9 of
// the result, a tenth of a float's ulp); 2^k built in the exponent field. x is clamped to where 2^k
// stays a normal float: e^x of x below -87.3 comes out as e^-87.3 (~1e-38), above 88.3 as e^88.3.
TH_VEC_INLINE __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);  // ln 2's first 16 bits
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);     // the rest
  static constexpr float kTaylor[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  __m256 p = _mm256_set1_ps(kTaylor[0]);
  for (size_t i = 1; i < sizeof kTaylor / sizeof kTaylor[0]; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kTaylor[i]));
  const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_k));
}

// Runs op on 8 floats at a time; the last n % 8 go through op too, copied into zero-padded lanes.
template <class Op>
TH_VEC_INLINE void for_lanes(size_t n, Op op) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) op(i, size_t(8));
  if (i < n) op(i, n - i);
}

TH_VEC_INLINE __m256 load_part(const float* p, size_t count) {
  if (count == 8) return _mm256_loadu_ps(p);
  alignas(32) float lanes[8] = {};
  std::memcpy(lanes, p, count * sizeof(float));
  return _mm256_load_ps(lanes);
}

TH_VEC_INLINE void store_part(float* p, __m256 v, size_t count) {
  if (count == 8) return _mm256_storeu_ps(p, v);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  std::memcpy(p, lanes, count * sizeof(float));
}

void exp_avx2(const float* x, float* out, size_t n) {
  for_lanes(n, [&](size_t i, size_t count) { store_part(out + i, exp8(load_part(x + i, count)), count); });
}

void silu_mul_avx2(float* g, const float* u, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for_lanes(n, [&](size_t i, size_t count) {
    const __m256 v = load_part(g + i, count);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
    store_part(g + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), load_part(u + i, count)), count);
  });
}

// The squares are exact in double, so one FMA per element adds exactly what `ss += x * x` would.
void rmsnorm_avx2(const float* x, const float* w, float eps, float* out, size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for_lanes(n, [&](size_t i, size_t count) {
    const __m256 v = load_part(x + i, count);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  });
  const __m256d a = _mm256_add_pd(a0, a1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  const double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  const __m256 scale = _mm256_set1_ps(float(1.0 / std::sqrt(ss / double(n) + double(eps))));
  for_lanes(n, [&](size_t i, size_t count) {
    store_part(out + i, _mm256_mul_ps(_mm256_mul_ps(load_part(x + i, count), scale), load_part(w + i, count)), count);
  });
}
TH_VEC_INLINE __m256 lowest8() { return _mm256_set1_ps(-std::numeric_limits<float>::infinity()); }

float max_avx2(const float* x, size_t n) {
  __m256 m = lowest8();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = *std::max_element(lanes, lanes + 8);
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

double sum_avx2(const float* x, size_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) total += x[i];
  return total;
}
#pragma GCC pop_options
#endif

struct Ops {
  void (*rmsnorm)(const float*, const float*, float, float*, size_t);
  void (*silu_mul)(float*, const float*, size_t);
  void (*exp)(const float*, float*, size_t);
  float (*max)(const float*, size_t);
  double (*sum)(const float*, size_t);
};

const Ops& ops() {
  static const Ops portable{rmsnorm_portable, silu_mul_portable, exp_portable, max_portable, sum_portable};
#if defined(__x86_64__)
  static const Ops avx2{rmsnorm_avx2, silu_mul_avx2, exp_avx2, max_avx2, sum_avx2};
  // Every kernel set but the portable one needs AVX2 + FMA.
  if (std::strcmp(matmul_kernels(), "portable") != 0) return avx2;
#endif
  return portable;
}

}  // namespace

void rmsnorm(const float* x, const float* w, float eps, float* out, size_t n) { ops().rmsnorm(x, w, eps, out, n); }
void silu_mul(float* g, const float* u, size_t n) { ops().silu_mul(g, u, n); }
void exp(const float* x, float* out, size_t n) { ops().exp(x, out, n); }
float max(const float* x, size_t n) { return ops().max(x, n); }
double sum(const float* x, size_t n) { return ops().sum(x, n); }

void add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace tokenhost::vec
