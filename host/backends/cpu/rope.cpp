#include "backends/cpu/rope.hpp"

#include <cmath>

#include "base/compute_pool.hpp"

namespace tokenhost {

void rope_angles(const std::vector<int32_t>& positions, size_t head_dim, const RopeSettings& r, std::vector<double>& cos_sin) {
  const size_t half = head_dim / 2, n_rows = positions.size();
  std::vector<double> freq(half);
  for (size_t i = 0; i < half; ++i) freq[i] = std::pow(double(r.theta), -2.0 * double(i) / double(head_dim));
  cos_sin.resize(n_rows * half * 2);
  auto rows = [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row)
      for (size_t i = 0; i < half; ++i) {
        const double a = double(positions[row]) * double(r.freq_scale) * freq[i];
        cos_sin[(row * half + i) * 2] = std::cos(a);
        cos_sin[(row * half + i) * 2 + 1] = std::sin(a);
      }
  };
  // Worth the pool's wake-up only for a prefill's many rows.
  if (n_rows < 2 || n_rows * half * 16 < 16384) rows(0, n_rows);
  else compute_pool().parallel_for(n_rows, rows);
}

void rope(float* v, size_t n_heads, size_t head_dim, const double* cos_sin, bool neox) {
  const size_t half = head_dim / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* x = v + h * head_dim;
    for (size_t i = 0; i < half; ++i) {
      const double c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const size_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
      const float x0 = x[i0], x1 = x[i1];
      x[i0] = float(x0 * c - x1 * s);
      x[i1] = float(x0 * s + x1 * c);
    }
  }
}

}  // namespace tokenhost
