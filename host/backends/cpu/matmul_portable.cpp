// The portable kernel set: plain loops, for any CPU. A tile of rows is the one-row loop per row.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/quant.hpp"
#include "backends/cpu/matmul_kernels.hpp"

namespace tokenhost::matmul_detail {
namespace {

float dot_f32(const float* a, const float* b, size_t n) {
  float acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0;
  for (float v : acc) s += v;
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_f16(const uint16_t* a, const float* b, size_t n) {
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += quant::fp16_to_f32(a[i]) * b[i];
  return s;
}

// Row k of x.
float dot_f32_row(const float* w, const FRows& x, size_t k, size_t n) { return dot_f32(w, x.x + k * x.stride, n); }
float dot_f16_row(const uint16_t* w, const FRows& x, size_t k, size_t n) { return dot_f16(w, x.x + k * x.stride, n); }

float dot_q8_0_row(const BlockQ8_0* w, const QRows& x, size_t k, size_t nb) {
  const QBlock* xb = x.blocks + k * nb;
  float s = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (size_t i = 0; i < kBlock; ++i) acc += int32_t(w[b].q[i]) * xb[b].q[i];
    s += float(acc) * quant::fp16_to_f32(w[b].d) * x.d[b * x.d_stride + k];
  }
  return s;
}

float dot_q4_0_row(const BlockQ4_0* w, const QRows& x, size_t k, size_t nb) {
  const QBlock* xb = x.blocks + k * nb;
  float s = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (size_t j = 0; j < kBlock / 2; ++j) {
      acc += (int32_t(w[b].q[j] & 0x0F) - 8) * xb[b].q[j];
      acc += (int32_t(w[b].q[j] >> 4) - 8) * xb[b].q[j + kBlock / 2];
    }
    s += float(acc) * quant::fp16_to_f32(w[b].d) * x.d[b * x.d_stride + k];
  }
  return s;
}

// Sub-block by sub-block, as the SIMD sets (see matmul_kquants.hpp), each in one integer sum.
float dot_q4_K_row(const BlockQ4_K* w, const QRows& x, size_t k, size_t nb) {
  const QBlock* xb = x.blocks + k * nb;
  float s = 0;
  for (size_t sb = 0; sb < nb / 8; ++sb) {
    const float d = quant::fp16_to_f32(w[sb].d), dmin = quant::fp16_to_f32(w[sb].dmin);
    for (size_t j = 0; j < 8; ++j) {
      uint8_t sc, m;
      quant::q4_K_scale_min(int(j), w[sb].scales, sc, m);
      const uint8_t* qs = w[sb].qs + 32 * (j / 2);
      const size_t b = 8 * sb + j;
      int32_t acc = 0;
      for (size_t i = 0; i < kBlock; ++i) acc += int32_t(j % 2 ? qs[i] >> 4 : qs[i] & 0x0F) * xb[b].q[i];
      s += d * float(sc) * x.d[b * x.d_stride + k] * float(acc) - dmin * float(m) * x.sums[b * x.d_stride + k];
    }
  }
  return s;
}

float dot_q6_K_row(const BlockQ6_K* w, const QRows& x, size_t k, size_t nb) {
  const QBlock* xb = x.blocks + k * nb;
  float s = 0;
  for (size_t sb = 0; sb < nb / 8; ++sb) {
    const float d = quant::fp16_to_f32(w[sb].d);
    for (size_t g = 0; g < 8; ++g) {  // element 32 g + i: half g / 4, group g % 4
      const size_t h = g / 4, gg = g % 4, b = 8 * sb + g;
      const uint8_t* ql = w[sb].ql + 64 * h + 32 * (gg & 1);
      const uint8_t* qh = w[sb].qh + 32 * h;
      int32_t half[2] = {0, 0};
      for (size_t i = 0; i < kBlock; ++i) {
        const int q = ((gg < 2 ? ql[i] & 0x0F : ql[i] >> 4) | (((qh[i] >> (2 * gg)) & 3) << 4)) - 32;
        half[i / 16] += q * xb[b].q[i];
      }
      s += d * x.d[b * x.d_stride + k] *
           (float(w[sb].scales[2 * g]) * float(half[0]) + float(w[sb].scales[2 * g + 1]) * float(half[1]));
    }
  }
  return s;
}

// R activation rows against one weight row, through the one-row loop.
template <size_t R, class W, class X, float (*Dot)(const W*, const X&, size_t, size_t)>
void rows(const uint8_t* w, size_t, const X& x, size_t n, float* out) {
  for (size_t k = 0; k < R; ++k) out[k] = Dot(reinterpret_cast<const W*>(w), x, k, n);
}

template <class W, class X, float (*Dot)(const W*, const X&, size_t, size_t)>
TypeKernels<X> type_kernels(bool wants_sums = false) {
  TypeKernels<X> k;
  k.one = rows<1, W, X, Dot>;
  k.four = rows<4, W, X, Dot>;
  k.wants_sums = wants_sums;
  return k;
}

}  // namespace

void quantize_portable(const float* x, size_t nb, int bias_k, QBlock* blocks, float* d, float* sums,
                       size_t d_stride) {
  for (size_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0;
    for (size_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(xb[i]));
    const float scale = amax / 127.0f, inv = scale != 0 ? 1.0f / scale : 0.0f;
    d[b * d_stride] = scale;
    int8_t* q = blocks[b].q;
    for (size_t i = 0; i < kBlock; ++i) q[i] = int8_t(std::nearbyint(xb[i] * inv));
    if (sums != nullptr) {
      int32_t sum = 0;
      for (size_t i = 0; i < kBlock; ++i) sum += q[i];
      sums[b * d_stride] = scale * float(sum);
    }
    if (bias_k == 0) continue;
    for (size_t j = 0; j < 8; ++j)
      blocks[b].bias[j] = -bias_k * (int32_t(q[4 * j]) + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3]);
  }
}

void pair_blocks(QBlock* blocks, size_t nb) {
  constexpr size_t half = kBlock / 2;
  for (size_t b = 0; b + 2 <= nb; b += 2) {
    QBlock& first = blocks[b];
    QBlock& second = blocks[b + 1];
    QBlock low, high;  // the new blocks b and b + 1
    std::memcpy(low.q, first.q, half);
    std::memcpy(low.q + half, second.q, half);
    std::memcpy(high.q, first.q + half, half);
    std::memcpy(high.q + half, second.q + half, half);
    for (size_t j = 0; j < 4; ++j) {
      low.bias[j] = first.bias[j] + first.bias[j + 4];
      low.bias[j + 4] = second.bias[j] + second.bias[j + 4];
    }
    std::memcpy(high.bias, first.bias, sizeof high.bias);  // unread
    first = low;
    second = high;
  }
}

void to_quad_layout(QBlock* blocks, float* d, size_t nb) {
  constexpr size_t half = kBlock / 2;
  const size_t padded = group_blocks(nb);
  std::memset(static_cast<void*>(blocks + nb), 0, (padded - nb) * sizeof(QBlock));
  for (size_t b = 0; b < padded; b += 4) {
    QuadBlock quad;
    for (size_t m = 0; m < 4; ++m) {
      const QBlock& block = blocks[b + m];
      std::memcpy(quad.first + m * half, block.q, half);
      std::memcpy(quad.last + m * half, block.q + half, half);
      for (size_t j = 0; j < 4; ++j) quad.bias[4 * m + j] = block.bias[j] + block.bias[j + 4];
    }
    std::memset(quad.unused, 0, sizeof quad.unused);
    std::memcpy(static_cast<void*>(blocks + b), &quad, sizeof quad);
  }
  std::fill(d + nb, d + padded, 0.0f);
}

void to_group_layout(QBlock* blocks, const float* d, size_t nb) {
  const size_t padded = group_blocks(nb);
  for (size_t g = 0; g < padded; g += kGroup) {
    GroupBlock group{};
    for (size_t lane = 0; lane < kGroup; ++lane) {
      const size_t b = g + lane;
      if (b >= nb) continue;  // zeros
      for (size_t j = 0; j < 8; ++j) std::memcpy(&group.chunk[j][4 * lane], blocks[b].q + 4 * j, 4);
      int32_t bias = 0;
      for (int32_t lane_bias : blocks[b].bias) bias += lane_bias;
      group.bias[lane] = bias;
      group.d[lane] = d[b];
    }
    std::memcpy(static_cast<void*>(blocks + g), &group, sizeof group);
  }
}

const KernelSet* portable_set() {
  static const KernelSet set{"portable",
                             quantize_portable,
                             type_kernels<float, FRows, dot_f32_row>(),
                             type_kernels<uint16_t, FRows, dot_f16_row>(),
                             type_kernels<BlockQ8_0, QRows, dot_q8_0_row>(),
                             type_kernels<BlockQ4_0, QRows, dot_q4_0_row>(),
                             type_kernels<BlockQ4_K, QRows, dot_q4_K_row>(true),
                             type_kernels<BlockQ6_K, QRows, dot_q6_K_row>()};
  return &set;
}

}  // namespace tokenhost::matmul_detail
