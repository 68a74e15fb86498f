// A priori bounds of the quantizers' error (model/quant.hpp), from the input alone: what a quantized row
// may differ from the floats it was made of.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/quant.hpp"

namespace tokenhost::testing {

// Upper bound of the fp16 value a quantizer stores for a scale v >= 0: rounding to nearest moves it by
// at most half a step (relative 2^-11, or 2^-25 among subnormals); the K quantizers round up, by at
// most a step (2^-10 relative, 2^-24 absolute).
inline double fp16_near(double v) { return std::max(v * 0x1p-11, 0x1p-25); }
inline double fp16_up(double v) { return v * (1 + 0x1p-10) + 0x1p-24; }

// A priori bound of |dequantize(quantize(x))[i] - x[i]| for each i, from x alone.
inline std::vector<double> error_bounds(th_dtype t, const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<double> b(n, 0.0);
  const double slack = 1 + 1e-5;  // float arithmetic inside the quantizers
  switch (t) {
    case TH_DTYPE_F32:
      break;
    case TH_DTYPE_F16:  // round to nearest: half a unit in the last place
      for (size_t i = 0; i < n; ++i) b[i] = std::fabs(x[i]) < 65504 ? fp16_near(std::fabs(x[i])) : INFINITY;
      break;
    case TH_DTYPE_BF16:
      for (size_t i = 0; i < n; ++i) b[i] = std::fabs(x[i]) * 0x1p-8;
      break;
    case TH_DTYPE_Q8_0:  // d = amax/127; x/d rounds by <= 1/2; |q| <= 127 times fp16's error in d
      for (size_t k = 0; k < n; k += 32) {
        double amax = 0;
        for (size_t i = k; i < k + 32; ++i) amax = std::max(amax, double(std::fabs(x[i])));
        const double d = amax / 127;
        for (size_t i = k; i < k + 32; ++i) b[i] = (d / 2 + 127 * fp16_near(d)) * slack;
      }
      break;
    case TH_DTYPE_Q4_0:  // d = |max|/8; the far side stops at +7: elements beyond 7.5 d err by <= d
      for (size_t k = 0; k < n; k += 32) {
        double amax = 0, max = 0;
        for (size_t i = k; i < k + 32; ++i) {
          if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
        }
        const double d = amax / 8;
        for (size_t i = k; i < k + 32; ++i) {
          const bool clamped = max != 0 && -8 * x[i] / max > 7.5;
          b[i] = ((clamped ? d : d / 2) + 8 * fp16_near(d)) * slack;
        }
      }
      break;
    case TH_DTYPE_Q4_K:  // steps <= (R + dmin) / 15 + d, R = max(max,0) - min(min,0); error <= step/2
      for (size_t k = 0; k < n; k += 256) {
        double lo = 0, hi = 0;
        for (size_t i = k; i < k + 256; ++i) lo = std::min(lo, double(x[i])), hi = std::max(hi, double(x[i]));
        const double r = hi - lo;
        const double s = (r + fp16_up(-lo / 63)) / 15;
        for (size_t i = k; i < k + 256; ++i) b[i] = (s + fp16_up(s / 63)) / 2 * slack;
      }
      break;
    case TH_DTYPE_Q6_K:  // sub-block steps <= A/31 + d, d <= A/(31*127) rounded up; error <= step/2
      for (size_t k = 0; k < n; k += 256) {
        double amax = 0;
        for (size_t i = k; i < k + 256; ++i) amax = std::max(amax, double(std::fabs(x[i])));
        const double s = amax / 31;
        for (size_t i = k; i < k + 256; ++i) b[i] = (s + fp16_up(s / 127)) / 2 * slack;
      }
      break;
    default:
      FAIL("no bound for " << tokenhost::quant::dtype_name(t));
  }
  return b;
}

}  // namespace tokenhost::testing
