// The forward pass's elementwise math against float64 formulas on fresh random inputs, at every SIMD
// level this CPU runs (the level follows the matmul kernel set); and each element's result is the same
// wherever it lies in the array (vector body or tail), so that rows do not depend on their batch.
#include <catch2/catch.hpp>

#include <cmath>

#include "harness.hpp"
#include "kernel_sets.hpp"
#include "backends/cpu/matmul.hpp"
#include "backends/cpu/vector_ops.hpp"

namespace cpu_vector_ops_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::vector<float> uniform(size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

TEST_CASE("vector ops: exp is within 2 ulp of the float64 exponential over the float range", "[vector_ops]") {
  auto rng = fresh_rng("vector ops exp");
  const auto x = uniform(4099, -87.0f, 88.0f, rng);
  for_each_kernel_set([&] {
    std::vector<float> y(x.size());
    vec::exp(x.data(), y.data(), x.size());
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(double(x[i]));
      worst = std::max(worst, std::abs(double(y[i]) - want) / want);
    }
    INFO("worst relative error " << worst);
    REQUIRE(worst < 2.4e-7);  // 2 ulp of a float
  });
}

TEST_CASE("vector ops: exp saturates instead of overflowing or flushing to zero", "[vector_ops]") {
  for_each_kernel_set([&] {
    const std::vector<float> x = {-1000.0f, -87.3f, 88.3f, 1000.0f};
    std::vector<float> y(x.size());
    vec::exp(x.data(), y.data(), x.size());
    for (float v : y) REQUIRE(std::isfinite(v));
    REQUIRE(y[0] >= 0.0f);
    REQUIRE(y[0] < 1e-37f);
    REQUIRE(y[3] > 1e38f);
  });
}

TEST_CASE("vector ops: silu_mul and rmsnorm match float64 formulas", "[vector_ops]") {
  auto rng = fresh_rng("vector ops formulas");
  for (size_t n : {1, 7, 8, 9, 64, 768, 2051}) {
    const auto g0 = uniform(n, -20.0f, 20.0f, rng), u = uniform(n, -3.0f, 3.0f, rng);
    const auto w = uniform(n, 0.5f, 1.5f, rng), x = uniform(n, -4.0f, 4.0f, rng);
    for_each_kernel_set([&] {
      INFO("n = " << n);
      std::vector<float> g = g0;
      vec::silu_mul(g.data(), u.data(), n);
      for (size_t i = 0; i < n; ++i)
        REQUIRE(g[i] == Approx(silu(g0[i]) * u[i]).epsilon(1e-6).margin(1e-12));
      std::vector<float> out(n);
      vec::rmsnorm(x.data(), w.data(), 1e-5f, out.data(), n);
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const double s = 1.0 / std::sqrt(ss / double(n) + 1e-5);
      for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == Approx(x[i] * s * w[i]).epsilon(1e-6).margin(1e-12));
    });
  }
}

TEST_CASE("vector ops: an element's result does not depend on its offset or the array's length", "[vector_ops]") {
  auto rng = fresh_rng("vector ops invariance");
  const size_t n = 53;
  const auto g0 = uniform(n, -30.0f, 30.0f, rng), u = uniform(n, -2.0f, 2.0f, rng);
  for_each_kernel_set([&] {
    std::vector<float> whole = g0;
    vec::silu_mul(whole.data(), u.data(), n);
    for (size_t begin = 0; begin < n; begin += 5)
      for (size_t len = 1; begin + len <= n; len += 3) {
        std::vector<float> part(g0.begin() + long(begin), g0.begin() + long(begin + len));
        vec::silu_mul(part.data(), u.data() + begin, len);
        for (size_t i = 0; i < len; ++i) REQUIRE(part[i] == whole[begin + i]);
      }
  });
}

TEST_CASE("vector ops: max and a double sum over a vocabulary-sized row", "[vector_ops]") {
  auto rng = fresh_rng("vector ops max sum");
  for (size_t n : {1, 7, 8, 9, 32000, 32003}) {
    const auto x = uniform(n, -30.0f, 30.0f, rng);
    for_each_kernel_set([&] {
      INFO("n = " << n);
      REQUIRE(vec::max(x.data(), n) == *std::max_element(x.begin(), x.end()));
      double want = 0;
      for (float v : x) want += v;
      REQUIRE(vec::sum(x.data(), n) == Approx(want).epsilon(1e-12).margin(1e-9));
    });
  }
}

}  // namespace cpu_vector_ops_tests
