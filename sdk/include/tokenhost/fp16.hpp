// tokenhost plugin SDK: IEEE binary16 (fp16) conversions, header-only (C++17), for plugins that keep or
// read f16 data (an f16 KV cache: th_kv_layout.dtype == TH_DTYPE_F16). The host converts with these
// same functions, so a value a plugin writes and the host reads (or the other way) is bit for bit the
// same on both sides.
//
// f32 -> fp16 rounds to nearest, ties to even (as F16C's _MM_FROUND_TO_NEAREST_INT does), maps
// overflow to infinity and keeps NaN a quiet NaN of the same sign; fp16 -> f32 is exact.
#ifndef TOKENHOST_FP16_HPP
#define TOKENHOST_FP16_HPP

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tokenhost::sdk {

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    const float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 0x1F ? sign | 0x7F800000u | (mant << 13)          // inf / nan
                                    : sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t f32_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const auto sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return uint16_t(sign | 0x7E00 | ((a >> 13) & 0x3FF));  // nan stays (quiet) nan
  if (a >= 0x477FF000) return uint16_t(sign | 0x7C00);  // >= 65520 rounds (ties to even) to inf
  if (a < 0x38800000) {                                 // below 2^-14: subnormal or zero, units of 2^-24
    const uint32_t exp = a >> 23;
    const uint32_t shift = 126 - exp;  // value = mant * 2^(exp - 150) = (mant >> shift) * 2^-24
    if (exp == 0 || shift > 24) return sign;
    const uint32_t mant = (a & 0x7FFFFF) | 0x800000;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;  // may carry into the smallest normal: correct
    return uint16_t(sign | q);
  }
  uint32_t h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3FF);
  const uint32_t rem = a & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is correct too
  return uint16_t(sign | h);
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_FP16_HPP
