// Random SwiGLU experts for the moe tests, with their float64 reference (acc += w * expert(x)).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost::testing {

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float scale) {
  std::uniform_real_distribution<float> uni(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = uni(rng);
  return v;
}

struct Expert {
  std::vector<float> gate, up, down;  // [ffn][dim], [ffn][dim], [dim][ffn]
  uint32_t dim, ffn;
  Expert(std::mt19937_64& rng, uint32_t d, uint32_t f)
      : gate(random_floats(rng, size_t(f) * d, 1.0f / std::sqrt(float(d)))),
        up(random_floats(rng, size_t(f) * d, 1.0f / std::sqrt(float(d)))),
        down(random_floats(rng, size_t(d) * f, 1.0f / std::sqrt(float(f)))),
        dim(d),
        ffn(f) {}

  static th_tensor tensor(const std::vector<float>& data, int64_t rows, int64_t cols) {
    th_tensor t{};
    t.struct_size = sizeof(th_tensor);
    t.dtype = TH_DTYPE_F32;
    t.n_dims = 2;
    t.ne[0] = cols;
    t.ne[1] = rows;
    t.ne[2] = t.ne[3] = 1;
    t.nb[0] = sizeof(float);
    t.nb[1] = cols * int64_t(sizeof(float));
    t.nb[2] = t.nb[3] = rows * t.nb[1];
    t.data = const_cast<float*>(data.data());
    t.device = TH_DEVICE_CPU;
    return t;
  }
  th_moe_expert_weights view() const { return {tensor(gate, ffn, dim), tensor(up, ffn, dim), tensor(down, dim, ffn)}; }

  // acc += w * down(silu(gate x) * up x), in float64.
  void reference(const float* x, double w, std::vector<double>& acc) const {
    std::vector<double> h(ffn);
    for (uint32_t f = 0; f < ffn; ++f) {
      double g = 0, u = 0;
      for (uint32_t d = 0; d < dim; ++d) {
        g += double(gate[size_t(f) * dim + d]) * x[d];
        u += double(up[size_t(f) * dim + d]) * x[d];
      }
      h[f] = g / (1 + std::exp(-g)) * u;
    }
    for (uint32_t d = 0; d < dim; ++d) {
      double s = 0;
      for (uint32_t f = 0; f < ffn; ++f) s += double(down[size_t(d) * ffn + f]) * h[f];
      acc[d] += w * s;
    }
  }
};


}  // namespace tokenhost::testing
