#include "runtime/matmul.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "model/quant.hpp"
#include "runtime/compute_pool.hpp"

namespace tokenhost {
namespace {

constexpr size_t kBlock = 32;

// An activation block quantized to 8 bits: x ≈ d * q.
struct QBlock {
  float d;
  int8_t q[kBlock];
};

// ggml's weight blocks.
struct BlockQ8_0 {
  uint16_t d;
  int8_t q[kBlock];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t q[kBlock / 2];  // element j: low nibble of q[j]; element j + 16: high nibble
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "ggml block layouts");

void quantize_activations(const float* x, size_t n, QBlock* out) {
  for (size_t b = 0; b < n / kBlock; ++b) {
    float amax = 0;
    for (size_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(x[b * kBlock + i]));
    float d = amax / 127.0f, inv = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (size_t i = 0; i < kBlock; ++i) out[b].q[i] = int8_t(std::lround(x[b * kBlock + i] * inv));
  }
}

// ---- portable kernels ----

float dot_f32_portable(const float* a, const float* b, size_t n) {
  float acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0;
  for (float v : acc) s += v;
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_f16_portable(const uint16_t* a, const float* b, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += quant::fp16_to_f32(a[i]) * b[i];
  return s;
}

float dot_q8_0_portable(const BlockQ8_0* w, const QBlock* x, size_t nb) {
  float s = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (size_t i = 0; i < kBlock; ++i) acc += int32_t(w[b].q[i]) * x[b].q[i];
    s += float(acc) * quant::fp16_to_f32(w[b].d) * x[b].d;
  }
  return s;
}

float dot_q4_0_portable(const BlockQ4_0* w, const QBlock* x, size_t nb) {
  float s = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (size_t j = 0; j < kBlock / 2; ++j) {
      acc += (int32_t(w[b].q[j] & 0x0F) - 8) * x[b].q[j];
      acc += (int32_t(w[b].q[j] >> 4) - 8) * x[b].q[j + kBlock / 2];
    }
    s += float(acc) * quant::fp16_to_f32(w[b].d) * x[b].d;
  }
  return s;
}

// Four activation rows (stride apart) against one weight row: each output computed exactly as the
// one-row kernel computes it, so results do not depend on how rows are grouped.
void dot_f32_x4_portable(const float* w, const float* x, size_t stride, size_t n, float* out) {
  for (size_t k = 0; k < 4; ++k) out[k] = dot_f32_portable(w, x + k * stride, n);
}
void dot_q8_0_x4_portable(const BlockQ8_0* w, const QBlock* x, size_t stride, size_t nb, float* out) {
  for (size_t k = 0; k < 4; ++k) out[k] = dot_q8_0_portable(w, x + k * stride, nb);
}
void dot_f16_x4_portable(const uint16_t* w, const float* x, size_t stride, size_t n, float* out) {
  for (size_t k = 0; k < 4; ++k) out[k] = dot_f16_portable(w, x + k * stride, n);
}
void dot_q4_0_x4_portable(const BlockQ4_0* w, const QBlock* x, size_t stride, size_t nb, float* out) {
  for (size_t k = 0; k < 4; ++k) out[k] = dot_q4_0_portable(w, x + k * stride, nb);
}

// ---- AVX2 kernels (compiled for AVX2 whatever the build flags; used only where the CPU has it) ----
#if defined(__x86_64__)
#define TH_AVX2 __attribute__((target("avx2,fma,f16c")))

TH_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TH_AVX2 float dot_f32_avx2(const float* a, const float* b, size_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

TH_AVX2 float dot_f16_avx2(const uint16_t* a, const float* b, size_t n) {
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(b + i), acc);
  }
  float s = hsum(acc);
  for (; i < n; ++i) s += quant::fp16_to_f32(a[i]) * b[i];
  return s;
}

// Sum of 32 products of signed bytes, as 8 float lanes (the sign trick: |w| * (x with w's sign)).
TH_AVX2 inline __m256 dot_i8(__m256i w, __m256i x) {
  __m256i ax = _mm256_sign_epi8(w, w);
  __m256i sy = _mm256_sign_epi8(x, w);
  __m256i pairs = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

TH_AVX2 float dot_q8_0_avx2(const BlockQ8_0* w, const QBlock* x, size_t nb) {
  // Two blocks per iteration into two accumulators: the FMA chains overlap.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].q));
    __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].q));
    acc0 = _mm256_fmadd_ps(dot_i8(w0, x0), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), acc0);
    acc1 = _mm256_fmadd_ps(dot_i8(w1, x1), _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * x[b + 1].d), acc1);
  }
  for (; b < nb; ++b) {
    __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    acc0 = _mm256_fmadd_ps(dot_i8(wq, xq), _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// dot_f32_avx2 for four rows at once: the weight is loaded once, each row keeps the same two
// accumulators and the same tail as the one-row kernel (bit-identical results).
TH_AVX2 void dot_f32_x4_avx2(const float* w, const float* x, size_t stride, size_t n, float* out) {
  __m256 a0[4], a1[4];
  for (size_t k = 0; k < 4; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
    for (size_t k = 0; k < 4; ++k) {
      a0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k * stride + i), a0[k]);
      a1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k * stride + i + 8), a1[k]);
    }
  }
  for (size_t k = 0; k < 4; ++k) {
    float s = hsum(_mm256_add_ps(a0[k], a1[k]));
    for (size_t j = i; j < n; ++j) s += w[j] * x[k * stride + j];
    out[k] = s;
  }
}

// dot_q8_0_avx2 for four rows at once, with the same per-row arithmetic.
TH_AVX2 void dot_q8_0_x4_avx2(const BlockQ8_0* w, const QBlock* x, size_t stride, size_t nb, float* out) {
  __m256 a0[4], a1[4];
  for (size_t k = 0; k < 4; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].q));
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    for (size_t k = 0; k < 4; ++k) {
      const QBlock* xk = x + k * stride;
      __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk[b].q));
      __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk[b + 1].q));
      a0[k] = _mm256_fmadd_ps(dot_i8(w0, x0), _mm256_set1_ps(d0 * xk[b].d), a0[k]);
      a1[k] = _mm256_fmadd_ps(dot_i8(w1, x1), _mm256_set1_ps(d1 * xk[b + 1].d), a1[k]);
    }
  }
  for (; b < nb; ++b) {
    __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].q));
    const float d = _cvtsh_ss(w[b].d);
    for (size_t k = 0; k < 4; ++k) {
      const QBlock* xk = x + k * stride;
      __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk[b].q));
      a0[k] = _mm256_fmadd_ps(dot_i8(wq, xq), _mm256_set1_ps(d * xk[b].d), a0[k]);
    }
  }
  for (size_t k = 0; k < 4; ++k) out[k] = hsum(_mm256_add_ps(a0[k], a1[k]));
}

// A q4_0 block's 32 weights as signed bytes: element j is the low nibble of q[j], element j + 16
// its high nibble, each minus 8.
TH_AVX2 inline __m256i unpack_q4_0(const BlockQ4_0& w) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q));
  const __m128i lo = _mm_and_si128(packed, low), hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

TH_AVX2 float dot_q4_0_avx2(const BlockQ4_0* w, const QBlock* x, size_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m256i wq = unpack_q4_0(w[b]);
    __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    __m256 scale = _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d);
    acc = _mm256_fmadd_ps(dot_i8(wq, xq), scale, acc);
  }
  return hsum(acc);
}
// dot_f16_avx2 for four rows at once, with the same per-row arithmetic.
TH_AVX2 void dot_f16_x4_avx2(const uint16_t* w, const float* x, size_t stride, size_t n, float* out) {
  __m256 acc[4];
  for (size_t k = 0; k < 4; ++k) acc[k] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    for (size_t k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + k * stride + i), acc[k]);
  }
  for (size_t k = 0; k < 4; ++k) {
    float s = hsum(acc[k]);
    for (size_t j = i; j < n; ++j) s += quant::fp16_to_f32(w[j]) * x[k * stride + j];
    out[k] = s;
  }
}

// dot_q4_0_avx2 for four rows at once: the nibbles are unpacked once for the four rows.
TH_AVX2 void dot_q4_0_x4_avx2(const BlockQ4_0* w, const QBlock* x, size_t stride, size_t nb, float* out) {
  __m256 acc[4];
  for (size_t k = 0; k < 4; ++k) acc[k] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m256i wq = unpack_q4_0(w[b]);
    const float d = _cvtsh_ss(w[b].d);
    for (size_t k = 0; k < 4; ++k) {
      const QBlock* xk = x + k * stride;
      __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk[b].q));
      acc[k] = _mm256_fmadd_ps(dot_i8(wq, xq), _mm256_set1_ps(d * xk[b].d), acc[k]);
    }
  }
  for (size_t k = 0; k < 4; ++k) out[k] = hsum(acc[k]);
}
#endif

struct Kernels {
  float (*f32)(const float*, const float*, size_t);
  float (*f16)(const uint16_t*, const float*, size_t);
  float (*q8_0)(const BlockQ8_0*, const QBlock*, size_t);
  float (*q4_0)(const BlockQ4_0*, const QBlock*, size_t);
  void (*f32x4)(const float*, const float*, size_t, size_t, float*);
  void (*q8_0x4)(const BlockQ8_0*, const QBlock*, size_t, size_t, float*);
  void (*f16x4)(const uint16_t*, const float*, size_t, size_t, float*);
  void (*q4_0x4)(const BlockQ4_0*, const QBlock*, size_t, size_t, float*);
  const char* name;
};

const Kernels& kernels() {
  static const Kernels k = [] {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
        std::getenv("TOKENHOST_PORTABLE_KERNELS") == nullptr)
      return Kernels{dot_f32_avx2,    dot_f16_avx2,     dot_q8_0_avx2,    dot_q4_0_avx2,   dot_f32_x4_avx2,
                     dot_q8_0_x4_avx2, dot_f16_x4_avx2, dot_q4_0_x4_avx2, "avx2"};
#endif
    return Kernels{dot_f32_portable,     dot_f16_portable,    dot_q8_0_portable,    dot_q4_0_portable,
                   dot_f32_x4_portable,  dot_q8_0_x4_portable, dot_f16_x4_portable, dot_q4_0_x4_portable,
                   "portable"};
  }();
  return k;
}

// Output rows are split across the pool in chunks; each weight row is read once for all n_rows.
struct NoRowDot4 {};

// Output rows are split across the pool; dot(row, r) is one output, dot4(row, r, out) the outputs of
// rows r..r+3 (identical arithmetic, the weight row loaded once), when the type has such a kernel.
template <class RowDot, class RowDot4 = NoRowDot4>
void for_rows(const WeightView& w, size_t n_rows, size_t act_row_bytes, float* y, RowDot dot, RowDot4 dot4 = {}) {
  const size_t rows = size_t(w.rows);
  // Small products are not worth waking the pool.
  const bool parallel = rows * size_t(w.cols) * n_rows >= 32768;
  // Activation rows go in groups small enough to stay in L2 while the thread's weight rows stream
  // past them (each weight row is read from memory once per group), in multiples of four for the
  // four-row kernels; each output is still one dot product in a fixed order (batch-invariant).
  const size_t group = std::max<size_t>(4, ((64 * 1024) / std::max<size_t>(act_row_bytes, 1)) & ~size_t(3));
  auto body = [&](size_t begin, size_t end) {
    for (size_t r0 = 0; r0 < n_rows; r0 += group) {
      const size_t r1 = std::min(n_rows, r0 + group);
      for (size_t o = begin; o < end; ++o) {
        const uint8_t* row = w.row(int64_t(o));
        size_t r = r0;
        if constexpr (!std::is_same_v<RowDot4, NoRowDot4>) {
          float out[4];
          for (; r + 4 <= r1; r += 4) {
            dot4(row, r, out);
            for (size_t k = 0; k < 4; ++k) y[(r + k) * rows + o] = out[k];
          }
        }
        for (; r < r1; ++r) y[r * rows + o] = dot(row, r);
      }
    }
  };
  if (parallel) compute_pool().parallel_for(rows, body);
  else body(0, rows);
}

// A product through a one-row and a four-row kernel of weight blocks W and activations A: the
// activation rows lie `stride` A apart, and `stride` is also the length the kernels take (floats for
// float weights, blocks for quantized ones).
template <class W, class A>
void with_kernels(const WeightView& w, size_t n_rows, float* y, float (*one)(const W*, const A*, size_t),
                  void (*four)(const W*, const A*, size_t, size_t, float*), const A* act, size_t stride) {
  for_rows(
      w, n_rows, stride * sizeof(A), y,
      [&](const uint8_t* row, size_t r) { return one(reinterpret_cast<const W*>(row), act + r * stride, stride); },
      [&](const uint8_t* row, size_t r, float* out) {
        four(reinterpret_cast<const W*>(row), act + r * stride, stride, stride, out);
      });
}

}  // namespace

const char* matmul_kernels() { return kernels().name; }

void matmul(const WeightView& w, const float* x, size_t n_rows, float* y) {
  const Kernels& k = kernels();
  const size_t cols = size_t(w.cols);
  switch (w.type) {
    case TH_DTYPE_F32:
      return with_kernels(w, n_rows, y, k.f32, k.f32x4, x, cols);
    case TH_DTYPE_F16:
      return with_kernels(w, n_rows, y, k.f16, k.f16x4, x, cols);
    case TH_DTYPE_Q8_0:
    case TH_DTYPE_Q4_0: {
      const size_t nb = cols / kBlock;
      thread_local std::vector<QBlock> qx;
      qx.resize(nb * n_rows);
      for (size_t r = 0; r < n_rows; ++r) quantize_activations(x + r * cols, cols, &qx[r * nb]);
      if (w.type == TH_DTYPE_Q8_0) return with_kernels(w, n_rows, y, k.q8_0, k.q8_0x4, qx.data(), nb);
      return with_kernels(w, n_rows, y, k.q4_0, k.q4_0x4, qx.data(), nb);
    }
    default:
      // Each weight row is dequantized once per group of activation rows. The cache is keyed by the
      // call too: another product may reuse the same address for other data.
      static std::atomic<uint64_t> calls{0};
      const uint64_t call = ++calls;
      for_rows(w, n_rows, cols * sizeof(float), y, [&](const uint8_t* row, size_t r) {
        thread_local std::vector<float> buffer;
        thread_local const uint8_t* buffered = nullptr;
        thread_local uint64_t buffered_call = 0;
        if (row != buffered || call != buffered_call || buffer.size() != cols) {
          buffer.resize(cols);
          quant::dequantize_row(w.type, row, buffer.data(), int64_t(cols));
          buffered = row;
          buffered_call = call;
        }
        return k.f32(buffer.data(), x + r * cols, cols);
      });
      return;
  }
}

}  // namespace tokenhost
