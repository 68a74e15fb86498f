// matmul: every weight type against a float64 product of the dequantized weights, on fresh random
// inputs, for one and several activation rows, across the compute pool. CTest also runs these cases
// with TOKENHOST_PORTABLE_KERNELS=1, so both the SIMD and the portable kernels are checked.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>

#include "harness.hpp"
#include "model/quant.hpp"
#include "runtime/compute_pool.hpp"
#include "runtime/matmul.hpp"

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// A [rows][cols] matrix of normal values quantized to type, with its view.
struct RandomMatrix {
  std::vector<uint8_t> packed;
  WeightView view;
  RandomMatrix(th_dtype type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(cols));
    const size_t rb = quant::row_bytes(type, cols);
    packed.resize(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : values) v = normal(rng);
      quant::quantize_row(type, values.data(), &packed[size_t(r) * rb], cols);
    }
    view = WeightView{type, rows, cols, rb, packed.data()};
  }
};

std::vector<float> random_rows(size_t n, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * size_t(cols));
  for (auto& v : x) v = normal(rng);
  return x;
}

}  // namespace

TEST_CASE("matmul: each weight type matches a float64 product within its bound", "[matmul]") {
  auto rng = fresh_rng("matmul");
  std::printf("kernels: %s, %zu threads\n", matmul_kernels(), compute_pool().threads());
  for (th_dtype type : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_BF16, TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K}) {
    for (size_t n_rows : {size_t(1), size_t(5)}) {
      const int64_t rows = 300, cols = 512;  // large enough to run on the pool
      INFO(quant::dtype_name(type) << ", " << n_rows << " rows");
      RandomMatrix m(type, rows, cols, rng);
      const WeightView& w = m.view;
      const size_t rb = w.row_bytes;
      const std::vector<uint8_t>& packed = m.packed;
      std::vector<float> x = random_rows(n_rows, cols, rng);
      std::vector<float> y(n_rows * size_t(rows));
      matmul(w, x.data(), n_rows, y.data());

      const bool int8_activations = type == TH_DTYPE_Q8_0 || type == TH_DTYPE_Q4_0;
      std::vector<float> deq(static_cast<size_t>(cols));
      for (int64_t o = 0; o < rows; ++o) {
        quant::dequantize_row(type, &packed[size_t(o) * rb], deq.data(), cols);
        for (size_t r = 0; r < n_rows; ++r) {
          const float* xr = &x[r * size_t(cols)];
          double exact = 0, magnitude = 0, bound = 0;
          for (int64_t c = 0; c < cols; ++c) {
            exact += double(deq[size_t(c)]) * xr[c];
            magnitude += std::abs(double(deq[size_t(c)]) * xr[c]);
          }
          if (int8_activations) {
            // Activations are rounded to 8 bits per block of 32: |x - x_q| <= amax / 254.
            for (int64_t b = 0; b < cols / 32; ++b) {
              double amax = 0, wsum = 0;
              for (int64_t c = b * 32; c < b * 32 + 32; ++c) {
                amax = std::max(amax, double(std::abs(xr[c])));
                wsum += std::abs(deq[size_t(c)]);
              }
              bound += wsum * amax / 254.0 * 1.0001;
            }
          }
          bound += 1e-5 * magnitude;  // f32 accumulation
          REQUIRE(std::abs(double(y[r * size_t(rows) + size_t(o)]) - exact) <= bound);
        }
      }
    }
  }
}

TEST_CASE("matmul: the compute pool covers every index exactly once", "[matmul]") {
  ComputePool pool(3);
  for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(1000)}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) ++hits[i];
    });
    for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
  }
}

TEST_CASE("matmul: a row's outputs are bit-identical whatever rows share its product", "[matmul]") {
  auto rng = fresh_rng("matmul invariance");
  for (th_dtype type : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q6_K}) {
    INFO(quant::dtype_name(type));
    // Tails of 0..2 blocks after the pairs the kernels process (K-quants come in 256-element blocks).
    const int64_t rows = 96, cols = type == TH_DTYPE_Q6_K ? 512 : 256 + 32 * int64_t(rng() % 3);
    const size_t n_rows = 11;  // groups of four and a remainder
    RandomMatrix m(type, rows, cols, rng);
    const WeightView& w = m.view;
    std::vector<float> x = random_rows(n_rows, cols, rng);
    std::vector<float> together(n_rows * static_cast<size_t>(rows)), alone(static_cast<size_t>(rows));
    matmul(w, x.data(), n_rows, together.data());
    for (size_t r = 0; r < n_rows; ++r) {
      matmul(w, &x[r * size_t(cols)], 1, alone.data());
      for (int64_t o = 0; o < rows; ++o) REQUIRE(together[r * size_t(rows) + size_t(o)] == alone[size_t(o)]);
    }
  }
}
