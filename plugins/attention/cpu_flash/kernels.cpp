// The portable and AVX2 kernels of attention.cpu_flash, and the choice among the levels.
#include "kernels.hpp"

#include <tokenhost/fp16.hpp>
#include <tokenhost/plugin_kv.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>

#if defined(__x86_64__)
#include <immintrin.h>
#define TH_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace cpu_flash {
namespace {

// An element of the cache as a float.
inline float value(float x) { return x; }
inline float value(uint16_t h) { return tokenhost::sdk::fp16_to_f32(h); }

// s[t] = scale * (q . k_t) for t < n.
template <class T>
float scores_portable(const float* __restrict q, const char* k, int64_t stride, uint32_t n, uint32_t d,
                      float scale, float* __restrict s) {
  float largest = -INFINITY;
  for (uint32_t t = 0; t < n; ++t) {
    const T* __restrict kt = at<T>(k, stride, t);
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight lanes: vectorizes without reassociating
    size_t e = 0;  // size_t indices: contiguous for the vectorizer (uint32_t ones may wrap)
    for (; e + 8 <= d; e += 8)
      for (size_t j = 0; j < 8; ++j) part[j] += q[e + j] * value(kt[e + j]);
    float sum = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; e < d; ++e) sum += q[e] * value(kt[e]);
    s[t] = scale * sum;
    largest = std::max(largest, s[t]);
  }
  return largest;
}

// acc += sum over t < n of p[t] * v_t. The block's sum is formed apart and then added: the rounding
// error grows with the number of blocks, not of positions.
template <class T>
void accum_portable(float* __restrict acc, const float* __restrict p, const char* v, int64_t stride, uint32_t n,
                    uint32_t d) {
  size_t e = 0;
  for (; e + 8 <= d; e += 8) {
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t t = 0; t < n; ++t) {
      const T* __restrict vt = at<T>(v, stride, t) + e;
      for (size_t j = 0; j < 8; ++j) x[j] += p[t] * value(vt[j]);
    }
    for (size_t j = 0; j < 8; ++j) acc[e + j] += x[j];
  }
  for (; e < d; ++e) {
    float x = 0;
    for (uint32_t t = 0; t < n; ++t) x += p[t] * value(at<T>(v, stride, t)[e]);
    acc[e] += x;
  }
}

// s[t] = exp(s[t] - m) for t < n; returns their sum.
float exp_sum_portable(float* s, uint32_t n, float m) {
  float sum = 0.0f;
  for (uint32_t t = 0; t < n; ++t) sum += (s[t] = std::exp(s[t] - m));
  return sum;
}

#if defined(__x86_64__)
// Eight elements of the cache as floats, and one.
TH_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
TH_AVX2 inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TH_AVX2 inline float value1(float x) { return x; }
TH_AVX2 inline float value1(uint16_t h) { return _cvtsh_ss(h); }

TH_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Cephes' expf, 8 lanes: x = g ln2 + r with |r| <= ln2 / 2, exp(r) by a polynomial, 2^g in the exponent.
TH_AVX2 inline __m256 exp_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3f));
  const __m256 g = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(g, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(g, _mm256_set1_ps(-2.12194440e-4f), r);
  // Horner's steps written out (as a loop over the coefficients it compiled to a loop).
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(g), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

TH_AVX2 float exp_sum_avx2(float* s, uint32_t n, float m) {
  __m256 sum8 = _mm256_setzero_ps();
  uint32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 p = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + t), _mm256_set1_ps(m)));
    _mm256_storeu_ps(s + t, p);
    sum8 = _mm256_add_ps(sum8, p);
  }
  float sum = hsum(sum8);
  for (; t < n; ++t) sum += (s[t] = std::exp(s[t] - m));
  return sum;
}

// Eight keys at a time (then four, then one): one load of q feeds eight FMAs into eight independent
// sums, enough of them in flight to keep both FMA pipes busy through their latency (with four, prefill
// attention ran at half the FMA rate). Head sizes that are a multiple of 8; other sizes and the last
// keys of a block go one key at a time. An eight-key group and a four-key group reduce each key's
// lanes in the same order (lane j with lane j + 4, after the pairs within each half), so a key's score
// does not depend on the group it falls in.
template <class T>
TH_AVX2 float scores_avx2(const float* q, const char* k, int64_t stride, uint32_t n, uint32_t d, float scale,
                          float* s) {
  const uint32_t d8 = d & ~7u;
  const __m256 scale8 = _mm256_set1_ps(scale);
  __m256 max8 = _mm256_set1_ps(-INFINITY);
  __m128 max4 = _mm_set1_ps(-INFINITY);
  float largest = -INFINITY;
  uint32_t t = 0;
  for (; d8 == d && t + 8 <= n; t += 8) {
    // Named accumulators and pointers, written out: in arrays the compiler keeps them in memory.
    const char* k0 = k + int64_t(t) * stride;
    const int64_t s1 = stride, s2 = 2 * stride, s3 = 3 * stride, s4 = 4 * stride;
    const char* k4 = k0 + s4;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 a4 = _mm256_setzero_ps(), a5 = _mm256_setzero_ps(), a6 = _mm256_setzero_ps(), a7 = _mm256_setzero_ps();
    for (uint32_t e = 0; e < d8; e += 8) {
      const __m256 qv = _mm256_loadu_ps(q + e);
      const size_t off = size_t(e) * sizeof(T);
      a0 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k0 + off)), a0);
      a1 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k0 + s1 + off)), a1);
      a2 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k0 + s2 + off)), a2);
      a3 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k0 + s3 + off)), a3);
      a4 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k4 + off)), a4);
      a5 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k4 + s1 + off)), a5);
      a6 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k4 + s2 + off)), a6);
      a7 = _mm256_fmadd_ps(qv, load8(reinterpret_cast<const T*>(k4 + s3 + off)), a7);
    }
    // Each 128-bit half of h0 holds the half-sums of keys 0-3, of h1 those of keys 4-7.
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    const __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    const __m256 scaled = _mm256_mul_ps(sum, scale8);
    _mm256_storeu_ps(s + t, scaled);
    max8 = _mm256_max_ps(max8, scaled);
  }
  for (; d8 == d && t + 4 <= n; t += 4) {
    const T* k0 = at<T>(k, stride, t);
    const T* k1 = at<T>(k, stride, t + 1);
    const T* k2 = at<T>(k, stride, t + 2);
    const T* k3 = at<T>(k, stride, t + 3);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (uint32_t e = 0; e < d8; e += 8) {
      const __m256 qv = _mm256_loadu_ps(q + e);
      a0 = _mm256_fmadd_ps(qv, load8(k0 + e), a0);
      a1 = _mm256_fmadd_ps(qv, load8(k1 + e), a1);
      a2 = _mm256_fmadd_ps(qv, load8(k2 + e), a2);
      a3 = _mm256_fmadd_ps(qv, load8(k3 + e), a3);
    }
    // Lane j of the result is the sum of a_j.
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 scaled = _mm_mul_ps(sum, _mm_set1_ps(scale));
    _mm_storeu_ps(s + t, scaled);
    max4 = _mm_max_ps(max4, scaled);
  }
  for (; t < n; ++t) {
    const T* kt = at<T>(k, stride, t);
    __m256 a = _mm256_setzero_ps();
    for (uint32_t e = 0; e < d8; e += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + e), load8(kt + e), a);
    float sum = hsum(a);
    for (uint32_t e = d8; e < d; ++e) sum += q[e] * value1(kt[e]);
    s[t] = scale * sum;
    largest = std::max(largest, s[t]);
  }
  max4 = _mm_max_ps(max4, _mm_max_ps(_mm256_castps256_ps128(max8), _mm256_extractf128_ps(max8, 1)));
  max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
  max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
  return std::max(largest, _mm_cvtss_f32(max4));
}

// acc[e, e + 8 N) += sum over t < n of p[t] * v_t[e, e + 8 N): the block's sum of those lanes in N
// registers over its n values, then added to acc.
template <class T, size_t N>
TH_AVX2 inline void accum_lanes(float* acc, const float* p, const char* v, int64_t stride, uint32_t n, uint32_t e) {
  __m256 a[N];
  #pragma GCC unroll 8
  for (size_t j = 0; j < N; ++j) a[j] = _mm256_setzero_ps();
  for (uint32_t t = 0; t < n; ++t) {
    const T* vt = at<T>(v, stride, t) + e;
    const __m256 w = _mm256_set1_ps(p[t]);
    #pragma GCC unroll 8
    for (size_t j = 0; j < N; ++j) a[j] = _mm256_fmadd_ps(w, load8(vt + 8 * j), a[j]);
  }
  #pragma GCC unroll 8
  for (size_t j = 0; j < N; ++j) _mm256_storeu_ps(acc + e + 8 * j, _mm256_add_ps(_mm256_loadu_ps(acc + e + 8 * j), a[j]));
}

// Eight elements at a time (int8 widened to int32, then to float, times the group's scale) where the
// group is a multiple of 8; the portable loop otherwise.
TH_AVX2 void dequant_q8_avx2(const int8_t* q, const float* scales, uint32_t n, uint32_t group, float* out) {
  if (group % 8 != 0) return tokenhost::sdk::dequantize_kv_q8(q, scales, n, group, out);
  for (uint32_t g = 0; g * group < n; ++g) {
    const __m256 s = _mm256_set1_ps(scales[g]);
    for (uint32_t i = g * group; i < (g + 1) * group; i += 8) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), s));
    }
  }
}

// 64 lanes of the block's sum at a time (then 32, then 8): eight independent sums for a head of 64, as
// many as the FMA pipes have in flight.
template <class T>
TH_AVX2 void accum_avx2(float* acc, const float* p, const char* v, int64_t stride, uint32_t n, uint32_t d) {
  uint32_t e = 0;
  for (; e + 64 <= d; e += 64) accum_lanes<T, 8>(acc, p, v, stride, n, e);
  for (; e + 32 <= d; e += 32) accum_lanes<T, 4>(acc, p, v, stride, n, e);
  for (; e + 8 <= d; e += 8) accum_lanes<T, 1>(acc, p, v, stride, n, e);
  for (; e < d; ++e) {
    float a = 0;
    for (uint32_t t = 0; t < n; ++t) a += p[t] * value1(at<T>(v, stride, t)[e]);
    acc[e] += a;
  }
}
#endif

}  // namespace

const Kernels* portable_kernels() {
  static const Kernels k{{scores_portable<float>, accum_portable<float>},
                         {scores_portable<uint16_t>, accum_portable<uint16_t>},
                         exp_sum_portable,
                         tokenhost::sdk::dequantize_kv_q8,
                         "portable"};
  return &k;
}

const Kernels* avx2_kernels() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  static const Kernels k{{scores_avx2<float>, accum_avx2<float>},
                         {scores_avx2<uint16_t>, accum_avx2<uint16_t>},
                         exp_sum_avx2,
                         dequant_q8_avx2,
                         "avx2"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) return &k;
#endif
  return nullptr;
}

const Kernels* find_kernels(const std::string& name) {
  if (name == "portable") return portable_kernels();
  if (name == "avx2") return avx2_kernels();
  if (name != "auto") return nullptr;
  if (std::getenv("TOKENHOST_PORTABLE_KERNELS") != nullptr) return portable_kernels();
  if (const Kernels* k = avx2_kernels()) return k;
  return portable_kernels();
}

}  // namespace cpu_flash
