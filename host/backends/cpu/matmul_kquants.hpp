// The K-quant kernels (q4_K, q6_K) of the x86 sets: templates over Dot, the instructions that multiply
// unsigned weight bytes by signed activation bytes into 8 int32 lanes of four products each (AVX2:
// maddubs + madd; AVX-512 VNNI: vpdpbusd), and over R, the activation rows sharing a weight row.
//
// Include only between `#pragma GCC push_options` / `#pragma GCC target(...)` and `pop_options`: the
// templates are compiled for the including set's target and have internal linkage, so each set keeps
// its own instructions.
//
// Both types are multiplied sub-block by sub-block against the activations' 32-element blocks, with
// exact integer lanes, then scaled in float:
//   q4_K: sub-block j is d sc_j q - dmin m_j with q in 0..15; its dot with activation block b is
//         d sc_j d_b (q . xq) - dmin m_j (d_b sum xq). The first term goes through the lanes; the
//         second, per row, into a separate sum of dmin * sum_j m_j sums_b (QRows::sums), subtracted
//         at the end.
//   q6_K: elements are d sc (q - 32) with q in 0..63 and a scale per 16 elements: the lanes start at
//         the activation bias for K = 32, so they hold sum (q - 32) xq; lanes 0-3 take the first
//         scale, lanes 4-7 the second.
#pragma once

#if defined(__x86_64__)
#include <cstring>

#include "backends/cpu/matmul_x86.hpp"

namespace tokenhost::matmul_detail {
namespace {

// Values of a per-block array laid out as QRows::d for R rows at block b: lane k is row k's, the lanes
// past R zero (2 and 3 rows read only theirs: the array may end at the last row's value).
template <size_t R>
inline __m128 per_row(const float* a, const QRows& x, size_t b) {
  static_assert(R >= 1 && R <= 4, "one to four rows");
  const float* p = a + b * x.d_stride;
  if constexpr (R == 1) return _mm_load_ss(p);
  else if constexpr (R == 2) return _mm_setr_ps(p[0], p[1], 0.0f, 0.0f);
  else if constexpr (R == 3) return _mm_setr_ps(p[0], p[1], p[2], 0.0f);
  else return _mm_loadu_ps(p);
}

inline __m256 broadcast_lane(__m128 v, size_t k) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(int(k)));
}

inline __m256i load_q(const QRows& x, size_t nb, size_t k, size_t b) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(x.blocks[k * nb + b].q));
}
inline __m256i load_bias(const QRows& x, size_t nb, size_t k, size_t b) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(x.blocks[k * nb + b].bias));
}

// acc[k] += lanes(u, row k's block b) * dsc * d_k[b], for a q4_K sub-block u with scale dsc = d sc_j.
template <class Dot, size_t R>
inline void q4_K_sub_block(__m256i u, float dsc, const QRows& x, size_t nb, size_t b, __m256* acc) {
  const __m128 s = _mm_mul_ps(_mm_set1_ps(dsc), per_row<R>(x.d, x, b));
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k)
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::lanes(u, load_q(x, nb, k, b))), broadcast_lane(s, k), acc[k]);
}

// A q4_K super-block's 8 scales (bytes 0-7) and 8 mins (bytes 8-15) out of its 12 packed bytes:
// quant::q4_K_scale_min for all sub-blocks at once, on 32-bit words (ggml's mask trick).
inline __m128i q4_K_scales_mins(const uint8_t* packed) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  const uint32_t six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
  u[3] = ((u[2] >> 4) & four) | (((u[1] >> 6) & two) << 4);
  const uint32_t mins_low = u[1] & six;
  u[1] = (u[2] & four) | (((u[0] >> 6) & two) << 4);
  u[2] = mins_low;
  u[0] &= six;
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

// Even and odd sub-blocks in two accumulators per row.
template <class Dot, size_t R>
void dot_q4_K(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  const BlockQ4_K* w = reinterpret_cast<const BlockQ4_K*>(wp);
  __m256 a0[R], a1[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
  __m128 mins = _mm_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (size_t sb = 0; sb < nb / 8; ++sb) {
    const BlockQ4_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(BlockQ4_K));  // every kernel may be the first to stream these weights
    const __m128i sc_m = q4_K_scales_mins(blk.scales);
    float dsc[8], m[8];  // d * scale, min of each sub-block
    const __m256 scales = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc_m));
    _mm256_storeu_ps(dsc, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(blk.d)), scales));
    _mm256_storeu_ps(m, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sc_m, 8))));
    __m128 m_sums = _mm_setzero_ps();
    #pragma GCC unroll 8
    for (size_t j = 0; j < 8; ++j) m_sums = _mm_fmadd_ps(_mm_set1_ps(m[j]), per_row<R>(x.sums, x, 8 * sb + j), m_sums);
    mins = _mm_fmadd_ps(_mm_set1_ps(_cvtsh_ss(blk.dmin)), m_sums, mins);
    #pragma GCC unroll 4
    for (size_t c = 0; c < 4; ++c) {
      const __m256i packed = load256(blk.qs + 32 * c);
      const size_t b = 8 * sb + 2 * c;
      q4_K_sub_block<Dot, R>(_mm256_and_si256(packed, low), dsc[2 * c], x, nb, b, a0);
      q4_K_sub_block<Dot, R>(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low), dsc[2 * c + 1], x, nb, b + 1, a1);
    }
  }
  float m[4];
  _mm_storeu_ps(m, mins);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) out[k] = hsum(_mm256_add_ps(a0[k], a1[k])) - m[k];
}

// The 6-bit values of q6_K group g (0..3) of a half: low 4 bits from ql (the 32 bytes at 32 (g & 1),
// low nibbles for g < 2), high 2 bits from qh at bit 2 g, moved to bits 4-5.
inline __m256i q6_K_values(__m256i ql0, __m256i ql1, __m256i qh, int g) {
  const __m256i low = _mm256_set1_epi8(0x0F), high = _mm256_set1_epi8(0x30);
  const __m256i ql = g & 1 ? ql1 : ql0;
  const __m256i nibbles = _mm256_and_si256(g < 2 ? ql : _mm256_srli_epi16(ql, 4), low);
  const __m256i top = g == 0   ? _mm256_slli_epi16(qh, 4)
                      : g == 1 ? _mm256_slli_epi16(qh, 2)
                      : g == 2 ? qh
                               : _mm256_srli_epi16(qh, 2);
  return _mm256_or_si256(nibbles, _mm256_and_si256(top, high));
}

// Groups (32 elements) in two accumulators per row, alternating.
template <class Dot, size_t R>
void dot_q6_K(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  const BlockQ6_K* w = reinterpret_cast<const BlockQ6_K*>(wp);
  __m256 acc[2][R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) acc[0][k] = acc[1][k] = _mm256_setzero_ps();
  for (size_t sb = 0; sb < nb / 8; ++sb) {
    const BlockQ6_K& blk = w[sb];
    prefetch_ahead(&blk, sizeof(BlockQ6_K));  // every kernel may be the first to stream these weights
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk.d));
    for (size_t h = 0; h < 2; ++h) {
      // d * scale for the half's 8 scales (16 elements each).
      const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * h)));
      const __m256 dsc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
      const __m256i qh = load256(blk.qh + 32 * h), ql0 = load256(blk.ql + 64 * h), ql1 = load256(blk.ql + 64 * h + 32);
      #pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i u = q6_K_values(ql0, ql1, qh, g);
        // Lanes 0-3 (elements 0-15) take scale 2 g, lanes 4-7 scale 2 g + 1.
        const __m256 pair = _mm256_permutevar8x32_ps(
            dsc, _mm256_setr_epi32(2 * g, 2 * g, 2 * g, 2 * g, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1));
        const size_t b = 8 * sb + 4 * h + size_t(g);
        #pragma GCC unroll 8
        for (size_t k = 0; k < R; ++k) {
          const __m256i lanes = Dot::lanes(load_bias(x, nb, k, b), u, load_q(x, nb, k, b));
          const __m256 s = _mm256_mul_ps(pair, _mm256_set1_ps(x.d[b * x.d_stride + k]));
          acc[g & 1][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), s, acc[g & 1][k]);
        }
      }
    }
  }
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) out[k] = hsum(_mm256_add_ps(acc[0][k], acc[1][k]));
}

template <class Dot>
TypeKernels<QRows> q4_K_kernels() {
  TypeKernels<QRows> k;
  k.one = dot_q4_K<Dot, 1>;
  k.two = dot_q4_K<Dot, 2>;
  k.three = dot_q4_K<Dot, 3>;
  k.four = dot_q4_K<Dot, 4>;
  k.wants_sums = true;
  return k;
}

template <class Dot>
TypeKernels<QRows> q6_K_kernels() {
  TypeKernels<QRows> k;
  k.one = dot_q6_K<Dot, 1>;
  k.two = dot_q6_K<Dot, 2>;
  k.three = dot_q6_K<Dot, 3>;
  k.four = dot_q6_K<Dot, 4>;
  k.bias_k = 32;
  return k;
}

}  // namespace
}  // namespace tokenhost::matmul_detail
#endif
