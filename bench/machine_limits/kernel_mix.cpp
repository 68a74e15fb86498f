#include "machine_limits/limits.hpp"
#include "machine_limits/loops.hpp"

#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

namespace tokenhost::bench {

namespace {

using timing::clock_type;
using timing::running;

// The packed kernels' activations as an 8-row pass reads them (QLayout::groups): per activation row,
// 16-block groups of 8 chunk lines, a bias line and a scale line, 1 KiB apart; rows 4 KiB apart
// (2048 columns). 4 groups: 32 KiB, in L1. Weights: 64 groups of a q4_0 row packed (4 lines each) and
// their fp16 scales, cycled (20 KiB).
constexpr size_t kRowBytes = 4096, kGroupBytes = 1024, kGroups = 4, kWeightGroups = 64;
constexpr size_t kBiasAt = 512, kScaleAt = 576;

struct MixData {
  alignas(64) int8_t act[8 * kRowBytes];
  alignas(64) uint8_t weights[kWeightGroups * 256];
  alignas(64) uint16_t weight_scales[kWeightGroups * 16];
  MixData() {
    for (size_t i = 0; i < sizeof act; ++i) act[i] = int8_t(i * 37 + 11);
    for (size_t r = 0; r < 8; ++r)
      for (size_t g = 0; g < kGroups; ++g) {
        int8_t* group = act + r * kRowBytes + g * kGroupBytes;
        for (size_t l = 0; l < 16; ++l) {
          const int32_t bias = -int32_t(l * 100 + r);
          const float scale = 0.001f * float(1 + l + r);
          std::memcpy(group + kBiasAt + 4 * l, &bias, 4);
          std::memcpy(group + kScaleAt + 4 * l, &scale, 4);
        }
      }
    for (size_t i = 0; i < sizeof weights; ++i) weights[i] = uint8_t(i * 13 + 5);
    for (size_t i = 0; i < kWeightGroups * 16; ++i) weight_scales[i] = uint16_t(0x2000 + i % 0x1000);  // small normal halves
  }
};

// One thread's GMAC over `seconds`, the loop the template arguments build:
//   Restart: each group's 8 chains start from the row's bias line and end in an add to the row's
//            accumulator (the kernels' dots), where without it 8 chains run on across the groups;
//   Float:   the group's end is the kernels' float step instead (convert, scale by dw x dx, fma);
//   Weights: the vpdpbusd take a q4_0 row's packed chunks, 4 lines a group loaded and unpacked into
//            8 registers (and, shift, and), where without it one constant register.
template <bool Restart, bool Float, bool Weights>
__attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vnni"))) double mix_loop(const MixData& m, double seconds) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512i w[8];
  for (size_t j = 0; j < 8; ++j) w[j] = _mm512_set1_epi8(char(3 + j));
#define TH_DECL(k) __m512i acc##k = _mm512_setzero_si512(); __m512 f##k = _mm512_setzero_ps();
  TH_EACH8(TH_DECL)
#undef TH_DECL
  double macs = 0;
  size_t wg = 0;
  const auto started = clock_type::now();
  do {
    for (int i = 0; i < 250; ++i) {
      for (size_t g = 0; g < kGroups; ++g) {
        const int8_t* p = m.act + g * kGroupBytes;
        if constexpr (Weights) {
          const uint8_t* q = m.weights + wg * 256;
          for (size_t c = 0; c < 4; ++c) {
            const __m512i r = _mm512_load_si512(q + 64 * c);
            w[c] = _mm512_and_si512(r, low);
            w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(r, 4), low);
          }
        }
        if constexpr (Restart) {
#define TH_HEAD(k) __m512i d##k = _mm512_load_si512(p + kRowBytes * k + kBiasAt);
          TH_EACH8(TH_HEAD)
#undef TH_HEAD
#define TH_STEP(k, j) d##k = _mm512_dpbusd_epi32(d##k, w[j], _mm512_load_si512(p + kRowBytes * k + 64 * j));
#define TH_CHUNK(j) TH_STEP(0, j) TH_STEP(1, j) TH_STEP(2, j) TH_STEP(3, j) TH_STEP(4, j) TH_STEP(5, j) TH_STEP(6, j) TH_STEP(7, j)
          TH_CHUNK(0) TH_CHUNK(1) TH_CHUNK(2) TH_CHUNK(3) TH_CHUNK(4) TH_CHUNK(5) TH_CHUNK(6) TH_CHUNK(7)
#undef TH_STEP
          if constexpr (Float) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m.weight_scales + wg * 16)));
#define TH_TAIL(k) f##k = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d##k), _mm512_mul_ps(dw, _mm512_load_ps(reinterpret_cast<const float*>(p + kRowBytes * k + kScaleAt))), f##k);
            TH_EACH8(TH_TAIL)
#undef TH_TAIL
          } else {
#define TH_ADD(k) acc##k = _mm512_add_epi32(acc##k, d##k);
            TH_EACH8(TH_ADD)
#undef TH_ADD
          }
        } else {
#define TH_STEP(k, j) acc##k = _mm512_dpbusd_epi32(acc##k, w[j], _mm512_load_si512(p + kRowBytes * k + 64 * j));
          TH_CHUNK(0) TH_CHUNK(1) TH_CHUNK(2) TH_CHUNK(3) TH_CHUNK(4) TH_CHUNK(5) TH_CHUNK(6) TH_CHUNK(7)
#undef TH_STEP
#undef TH_CHUNK
        }
        wg = (wg + 1) % kWeightGroups;
      }
    }
    macs += 250.0 * kGroups * 64 * 64;
  } while (running(started, seconds));
  __m512 f = _mm512_setzero_ps();
  __m512i a = _mm512_setzero_si512();
#define TH_SUM(k) f = _mm512_add_ps(f, f##k); a = _mm512_add_epi32(a, acc##k);
  TH_EACH8(TH_SUM)
#undef TH_SUM
  alignas(64) float fl[16];
  alignas(64) int32_t il[16];
  _mm512_store_ps(fl, f);
  _mm512_store_si512(il, a);
  timing::sink = timing::sink + il[0] + int64_t(fl[0]);
  return macs;
}


}  // namespace

KernelMix measure_kernel_mix(int runs, double seconds) {
  KernelMix mix;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) return mix;
  const auto data = std::make_unique<MixData>();
  auto gmacs = [&](double (*loop)(const MixData&, double)) {
    return timing::median_of(runs, [&] { return timing::rate(1, seconds, [&](double s) { return loop(*data, s); }) / 1e9; });
  };
  mix.chains = gmacs(mix_loop<false, false, false>);
  mix.restarted = gmacs(mix_loop<true, false, false>);
  mix.float_step = gmacs(mix_loop<true, true, false>);
  mix.q4_0_weights = gmacs(mix_loop<true, false, true>);
  mix.kernel = gmacs(mix_loop<true, true, true>);
  return mix;
}

}  // namespace tokenhost::bench
