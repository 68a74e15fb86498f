#include "model/quant.hpp"

#include <tokenhost/fp16.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

static_assert(std::endian::native == std::endian::little, "GGUF blocks are read in place: little-endian hosts only");

namespace tokenhost::quant {
namespace {

constexpr int kQK0 = 32;   // q8_0, q4_0
constexpr int kQKK = 256;  // q4_K, q6_K
constexpr size_t kQ8_0Bytes = 2 + 32;
constexpr size_t kQ4_0Bytes = 2 + 16;
constexpr size_t kQ4_KBytes = 2 + 2 + 12 + 128;
constexpr size_t kQ6_KBytes = 128 + 64 + 16 + 2;

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
float load_f16(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }

// ggml's nearest_int: round half to even (for |x| < 2^22, which the callers guarantee).
int nearest_int(float x) { return int(std::nearbyint(x)); }

// The smallest fp16 value h with fp16_to_f32(h) >= v, for finite v >= 0 (returns +inf past 65504).
uint16_t fp16_at_least(float v) {
  uint16_t h = f32_to_fp16(v);
  if (fp16_to_f32(h) < v) ++h;  // positive finite: the next encoding is the next larger value
  return h;
}

[[noreturn]] void unsupported(th_dtype type) {
  throw std::invalid_argument(std::string("element type ") + dtype_name(type) + " (" + std::to_string(type) +
                              ") is not supported (supported: f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)");
}

void check_row(th_dtype type, int64_t n) { (void)row_bytes(type, n); }

// ---- f16 rows: F16C where the CPU has it (an f16 KV cache converts every key and value it stores) --
// F16C rounds to nearest, ties to even, as f32_to_fp16 does, and its fp16 -> f32 is exact: both
// paths give the same bits (the tests compare them).

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void f32_to_fp16_f16c(const float* x, uint8_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * i), h);
  }
  for (; i < n; ++i) store_u16(d + 2 * i, f32_to_fp16(x[i]));
}

__attribute__((target("avx,f16c"))) void fp16_to_f32_f16c(const uint8_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i))));
  for (; i < n; ++i) y[i] = fp16_to_f32(load_u16(s + 2 * i));
}

bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    // clang (the fuzzing build) knows no "f16c" feature name: its CPUID bit (leaf 1, ECX bit 29) then.
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx") && f16c;
  }();
  return yes;
}
#endif

void f32_to_fp16_row(const float* x, uint8_t* d, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return f32_to_fp16_f16c(x, d, n);
#endif
  for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_fp16(x[i]));
}

void fp16_to_f32_row(const uint8_t* s, float* y, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return fp16_to_f32_f16c(s, y, n);
#endif
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(load_u16(s + 2 * i));
}

// ---- q8_0 / q4_0 -------------------------------------------------------------------------------

void dequantize_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ8_0Bytes, y += kQK0) {
    const float d = load_f16(b);
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < kQK0; ++j) y[j] = float(q[j]) * d;
  }
}

void quantize_q8_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ8_0Bytes, x += kQK0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(b, f32_to_fp16(d));
    auto* q = reinterpret_cast<int8_t*>(b + 2);
    for (int j = 0; j < kQK0; ++j) q[j] = int8_t(std::round(x[j] * id));
  }
}

void dequantize_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_0Bytes, y += kQK0) {
    const float d = load_f16(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < kQK0 / 2; ++j) {
      y[j] = float((qs[j] & 0x0F) - 8) * d;
      y[j + kQK0 / 2] = float((qs[j] >> 4) - 8) * d;
    }
  }
}

// ggml's reference: the element of largest magnitude maps exactly to -8 (d takes its sign); the other
// side reaches +7 only, so elements beyond 7.5 d on that side are clamped.
void quantize_q4_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_0Bytes, x += kQK0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(b, f32_to_fp16(d));
    uint8_t* qs = b + 2;
    for (int j = 0; j < kQK0 / 2; ++j) {
      const auto q0 = uint8_t(std::min(15, int(int8_t(x[j] * id + 8.5f))));
      const auto q1 = uint8_t(std::min(15, int(int8_t(x[j + kQK0 / 2] * id + 8.5f))));
      qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

// ---- q4_K --------------------------------------------------------------------------------------

void pack_scale_min_k4(int j, uint8_t sc, uint8_t m, uint8_t* q) {
  if (j < 4) {
    q[j] = uint8_t(q[j] | sc);
    q[j + 4] = uint8_t(q[j + 4] | m);
  } else {
    q[j + 4] = uint8_t((sc & 0x0F) | ((m & 0x0F) << 4));
    q[j - 4] = uint8_t(q[j - 4] | ((sc >> 4) << 6));
    q[j] = uint8_t(q[j] | ((m >> 4) << 6));
  }
}

void dequantize_q4_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_KBytes) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      q4_K_scale_min(2 * c, scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_K_scale_min(2 * c + 1, scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

// Sub-block j (32 elements, minimum lo_j, maximum hi_j) is represented as step_j * L - off_j, L in 0..15.
// Offsets first: off_j = dmin * m_j is the smallest multiple of dmin >= max(0, -lo_j), dmin the smallest
// fp16 with 63 dmin >= max_j max(0, -lo_j). Then steps: step_j = d * sc_j is the smallest multiple of d
// >= (hi_j + off_j) / 15, d the smallest fp16 with 63 d >= the largest of those. So every element lies
// in [-off_j, 15 step_j - off_j] and is rounded to the nearest level: |error| <= step_j / 2, and with
// R = max(max x, 0) - min(min x, 0) over the super-block, step_j < (R + 2 R / 63) / 15 (+ fp16 rounding
// up of d and dmin, relative 2^-10), i.e. |error| < 1.04 R / 30.
void quantize_q4_K(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_KBytes, x += kQKK) {
    float need_off[8], need_step[8], hi[8];
    float max_off = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float lo = xs[0], h = xs[0];
      for (int l = 1; l < 32; ++l) {
        lo = std::min(lo, xs[l]);
        h = std::max(h, xs[l]);
      }
      hi[j] = h;
      need_off[j] = std::max(0.0f, -lo);
      max_off = std::max(max_off, need_off[j]);
    }
    const uint16_t dmin_h = max_off > 0.0f ? fp16_at_least(max_off / 63.0f) : 0;
    const float dmin = fp16_to_f32(dmin_h);
    uint8_t m[8] = {}, sc[8] = {};
    float off[8];
    float max_step = 0.0f;
    for (int j = 0; j < 8; ++j) {
      if (dmin > 0.0f) {
        int lm = std::min(63, int(std::ceil(need_off[j] / dmin)));
        while (lm < 63 && float(lm) * dmin < need_off[j]) ++lm;
        m[j] = uint8_t(lm);
      }
      off[j] = dmin * float(m[j]);
      need_step[j] = std::max(0.0f, (hi[j] + off[j]) / 15.0f);
      max_step = std::max(max_step, need_step[j]);
    }
    const uint16_t d_h = max_step > 0.0f ? fp16_at_least(max_step / 63.0f) : 0;
    const float d = fp16_to_f32(d_h);
    for (int j = 0; j < 8; ++j) {
      if (d > 0.0f) {
        int ls = std::min(63, int(std::ceil(need_step[j] / d)));
        while (ls < 63 && float(ls) * d < need_step[j]) ++ls;
        sc[j] = uint8_t(ls);
      }
    }
    store_u16(b, d_h);
    store_u16(b + 2, dmin_h);
    uint8_t* scales = b + 4;
    std::memset(scales, 0, 12);
    for (int j = 0; j < 8; ++j) pack_scale_min_k4(j, sc[j], m[j], scales);
    uint8_t L[kQKK];
    for (int j = 0; j < 8; ++j) {
      const float step = d * float(sc[j]);
      for (int l = 0; l < 32; ++l) {
        const int q = step > 0.0f ? nearest_int((x[32 * j + l] + off[j]) / step) : 0;
        L[32 * j + l] = uint8_t(std::clamp(q, 0, 15));
      }
    }
    uint8_t* qs = b + 16;
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) qs[32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

// ---- q6_K --------------------------------------------------------------------------------------

// Element 128 h + 32 g + l (h half, g group 0..3, l 0..31): low 4 bits in ql[64 h + l + 32 (g & 1)]
// (low nibble for g < 2, high nibble otherwise), high 2 bits in qh[32 h + l] at bit 2 g; scale index
// (128 h + 32 g + l) / 16.
void dequantize_q6_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ6_KBytes) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = load_f16(b + 208);
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

// Symmetric, without ggml's search: sub-block j (16 elements, largest magnitude a_j) gets the step
// step_j = d * sc_j, the smallest multiple of d >= a_j / 31, d the smallest fp16 with 127 d >= max_j
// a_j / 31. Levels -31..31 then cover the sub-block without clamping: |error| <= step_j / 2 <
// (A / 31 + A / (31 * 127) (1 + 2^-10)) / 2 < 1.01 A / 62, A the super-block's largest magnitude.
void quantize_q6_K(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ6_KBytes, x += kQKK) {
    float need[16];
    float max_need = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float a = 0.0f;
      for (int l = 0; l < 16; ++l) a = std::max(a, std::fabs(x[16 * j + l]));
      need[j] = a / 31.0f;
      max_need = std::max(max_need, need[j]);
    }
    const uint16_t d_h = max_need > 0.0f ? fp16_at_least(max_need / 127.0f) : 0;
    const float d = fp16_to_f32(d_h);
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    uint8_t L[kQKK];
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      if (d > 0.0f) {
        s = std::min(127, int(std::ceil(need[j] / d)));
        while (s < 127 && float(s) * d < need[j]) ++s;
      }
      sc[j] = int8_t(s);
      const float step = d * float(s);
      for (int l = 0; l < 16; ++l) {
        const int q = step > 0.0f ? nearest_int(x[16 * j + l] / step) : 0;
        L[16 * j + l] = uint8_t(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        ql[l] = uint8_t((q1 & 0x0F) | ((q3 & 0x0F) << 4));
        ql[l + 32] = uint8_t((q2 & 0x0F) | ((q4 & 0x0F) << 4));
        qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
    store_u16(b + 208, d_h);
  }
}

}  // namespace

// ---- sizes and names ---------------------------------------------------------------------------

bool is_supported(th_dtype type) {
  switch (type) {
    case TH_DTYPE_F32:
    case TH_DTYPE_F16:
    case TH_DTYPE_BF16:
    case TH_DTYPE_Q8_0:
    case TH_DTYPE_Q4_0:
    case TH_DTYPE_Q4_K:
    case TH_DTYPE_Q6_K:
      return true;
    default:
      return false;
  }
}

size_t block_elems(th_dtype type) {
  switch (type) {
    case TH_DTYPE_F32:
    case TH_DTYPE_F16:
    case TH_DTYPE_BF16:
      return 1;
    case TH_DTYPE_Q8_0:
    case TH_DTYPE_Q4_0:
      return kQK0;
    case TH_DTYPE_Q4_K:
    case TH_DTYPE_Q6_K:
      return kQKK;
    default:
      unsupported(type);
  }
}

size_t block_bytes(th_dtype type) {
  switch (type) {
    case TH_DTYPE_F32:
      return 4;
    case TH_DTYPE_F16:
    case TH_DTYPE_BF16:
      return 2;
    case TH_DTYPE_Q8_0:
      return kQ8_0Bytes;
    case TH_DTYPE_Q4_0:
      return kQ4_0Bytes;
    case TH_DTYPE_Q4_K:
      return kQ4_KBytes;
    case TH_DTYPE_Q6_K:
      return kQ6_KBytes;
    default:
      unsupported(type);
  }
}

size_t row_bytes(th_dtype type, int64_t n) {
  const size_t be = block_elems(type), bb = block_bytes(type);
  if (n < 0 || uint64_t(n) % be != 0) {
    throw std::invalid_argument("a row of " + std::to_string(n) + " elements is not a whole number of " +
                                dtype_name(type) + " blocks (" + std::to_string(be) + " elements each)");
  }
  const uint64_t blocks = uint64_t(n) / be;
  if (blocks > std::numeric_limits<size_t>::max() / bb) {
    throw std::invalid_argument("a row of " + std::to_string(n) + " " + dtype_name(type) + " elements is too large");
  }
  return size_t(blocks * bb);
}

th_dtype supported_dtype(std::string_view name, bool ignore_case) {
  for (th_dtype t : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_BF16, TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K}) {
    const std::string_view known = dtype_name(t);
    const bool same = known.size() == name.size() &&
                      std::equal(known.begin(), known.end(), name.begin(), [&](char a, char b) {
                        return ignore_case ? std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)) : a == b;
                      });
    if (same) return t;
  }
  return -1;
}

const char* supported_dtype_names() { return "f32, f16, bf16, q8_0, q4_0, q4_K, q6_K"; }

const char* dtype_name(th_dtype type) {
  // ggml's type names by number; nullptr where ggml has no type (numbers it retired).
  static const char* const kNames[] = {
      "f32",     "f16",    "q4_0",    "q4_1",  nullptr, nullptr, "q5_0",   "q5_1",   "q8_0",  "q8_1",
      "q2_K",    "q3_K",   "q4_K",    "q5_K",  "q6_K",  "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
      "iq4_nl",  "iq3_s",  "iq2_s",   "iq4_xs", "i8",    "i16",   "i32",    "i64",    "f64",   "iq1_m",
      "bf16",    nullptr,  nullptr,   nullptr, "tq1_0", "tq2_0", nullptr,  nullptr,  nullptr, "mxfp4"};
  constexpr int kCount = int(sizeof(kNames) / sizeof(kNames[0]));
  if (type >= 0 && type < kCount && kNames[type] != nullptr) return kNames[type];
  thread_local std::string unknown;
  unknown = "unknown(" + std::to_string(type) + ")";
  return unknown.c_str();
}

// ---- rows --------------------------------------------------------------------------------------

void dequantize_row(th_dtype type, const void* src, float* dst, int64_t n) {
  check_row(type, n);
  const auto* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case TH_DTYPE_F32:
      if (n > 0) std::memcpy(dst, s, size_t(n) * sizeof(float));
      return;
    case TH_DTYPE_F16:
      return fp16_to_f32_row(s, dst, n);
    case TH_DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(s + 2 * i));
      return;
    case TH_DTYPE_Q8_0:
      return dequantize_q8_0(s, dst, n / kQK0);
    case TH_DTYPE_Q4_0:
      return dequantize_q4_0(s, dst, n / kQK0);
    case TH_DTYPE_Q4_K:
      return dequantize_q4_K(s, dst, n / kQKK);
    case TH_DTYPE_Q6_K:
      return dequantize_q6_K(s, dst, n / kQKK);
    default:
      unsupported(type);
  }
}

void quantize_row(th_dtype type, const float* src, void* dst, int64_t n) {
  check_row(type, n);
  auto* d = static_cast<uint8_t*>(dst);
  switch (type) {
    case TH_DTYPE_F32:
      if (n > 0) std::memcpy(d, src, size_t(n) * sizeof(float));
      return;
    case TH_DTYPE_F16:
      return f32_to_fp16_row(src, d, n);
    case TH_DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_bf16(src[i]));
      return;
    case TH_DTYPE_Q8_0:
      return quantize_q8_0(src, d, n / kQK0);
    case TH_DTYPE_Q4_0:
      return quantize_q4_0(src, d, n / kQK0);
    case TH_DTYPE_Q4_K:
      return quantize_q4_K(src, d, n / kQKK);
    case TH_DTYPE_Q6_K:
      return quantize_q6_K(src, d, n / kQKK);
    default:
      unsupported(type);
  }
}

double dot_row_reference(th_dtype type, const void* w, const float* x, int64_t n) {
  check_row(type, n);
  std::vector<float> row(static_cast<size_t>(n));
  dequantize_row(type, w, row.data(), n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(row[size_t(i)]) * double(x[i]);
  return sum;
}

// ---- fp16 / bf16 -------------------------------------------------------------------------------

// The SDK's conversions (plugins that read or write f16 data use the same ones).
float fp16_to_f32(uint16_t h) { return sdk::fp16_to_f32(h); }
uint16_t f32_to_fp16(float f) { return sdk::f32_to_fp16(f); }

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return uint16_t((u >> 16) | 0x0040);  // nan: keep it a quiet nan
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

}  // namespace tokenhost::quant
