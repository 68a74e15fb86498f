// GGUF element types: layouts, fp16 / bf16 conversions, quantize -> dequantize error bounds, dots.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "model/quant.hpp"
#include "quant_bounds.hpp"

namespace model_quant_tests {

namespace q = tokenhost::quant;
using tokenhost::testing::error_bounds;

namespace {

const th_dtype kAllTypes[] = {TH_DTYPE_F32,  TH_DTYPE_F16,  TH_DTYPE_BF16, TH_DTYPE_Q8_0,
                              TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K};

// A random seed per process (TOKENHOST_TEST_SEED repeats a run), printed once.
uint32_t test_seed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("TOKENHOST_TEST_SEED");
    return env != nullptr ? uint32_t(std::strtoul(env, nullptr, 10)) : uint32_t(std::random_device{}());
  }();
  static bool printed = false;
  if (!printed) {
    printed = true;
    WARN("random seed " << seed << " (TOKENHOST_TEST_SEED=" << seed << " repeats it)");
  }
  return seed;
}

std::vector<float> normal_row(std::mt19937& rng, int64_t n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<uint8_t> quantize(th_dtype t, const std::vector<float>& x) {
  std::vector<uint8_t> out(q::row_bytes(t, int64_t(x.size())));
  q::quantize_row(t, x.data(), out.data(), int64_t(x.size()));
  return out;
}

std::vector<float> dequantize(th_dtype t, const std::vector<uint8_t>& b, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  q::dequantize_row(t, b.data(), out.data(), n);
  return out;
}

// Relative RMS error bound over a row of normal samples, measured and then doubled or so:
// q8_0 ~0.0055 (step amax/127 ~ 0.019 sigma, rms step/sqrt(12)); q4_0 ~0.09 (step amax/8 ~ 0.3 sigma,
// plus the clamped +8 side); q4_K ~0.08 (step ~ range of 32 samples / 15 ~ 0.28 sigma); q6_K ~0.017
// (step ~ amax of 16 samples / 31 ~ 0.06 sigma); f16 ~2e-4, bf16 ~1.6e-3.
double rms_bound(th_dtype t) {
  switch (t) {
    case TH_DTYPE_F32:
      return 0.0;
    case TH_DTYPE_F16:
      return 5e-4;
    case TH_DTYPE_BF16:
      return 4e-3;
    case TH_DTYPE_Q8_0:
      return 0.01;
    case TH_DTYPE_Q4_0:
      return 0.13;
    case TH_DTYPE_Q4_K:
      return 0.1;
    case TH_DTYPE_Q6_K:
      return 0.03;
    default:
      return 0.0;
  }
}

}  // namespace

TEST_CASE("quant: block sizes, row sizes and names", "[quant]") {
  CHECK(q::block_elems(TH_DTYPE_F32) == 1);
  CHECK(q::block_bytes(TH_DTYPE_F32) == 4);
  CHECK(q::block_elems(TH_DTYPE_F16) == 1);
  CHECK(q::block_bytes(TH_DTYPE_F16) == 2);
  CHECK(q::block_elems(TH_DTYPE_BF16) == 1);
  CHECK(q::block_bytes(TH_DTYPE_BF16) == 2);
  CHECK(q::block_elems(TH_DTYPE_Q8_0) == 32);
  CHECK(q::block_bytes(TH_DTYPE_Q8_0) == 34);
  CHECK(q::block_elems(TH_DTYPE_Q4_0) == 32);
  CHECK(q::block_bytes(TH_DTYPE_Q4_0) == 18);
  CHECK(q::block_elems(TH_DTYPE_Q4_K) == 256);
  CHECK(q::block_bytes(TH_DTYPE_Q4_K) == 144);
  CHECK(q::block_elems(TH_DTYPE_Q6_K) == 256);
  CHECK(q::block_bytes(TH_DTYPE_Q6_K) == 210);

  CHECK(q::row_bytes(TH_DTYPE_F32, 64) == 256);
  CHECK(q::row_bytes(TH_DTYPE_Q8_0, 4096) == 128 * 34);
  CHECK(q::row_bytes(TH_DTYPE_Q4_K, 4096) == 16 * 144);
  CHECK(q::row_bytes(TH_DTYPE_Q6_K, 0) == 0);
  CHECK_THROWS_AS(q::row_bytes(TH_DTYPE_Q4_K, 100), std::invalid_argument);
  CHECK_THROWS_WITH(q::row_bytes(TH_DTYPE_Q4_0, 33), Catch::Contains("q4_0") && Catch::Contains("33"));
  CHECK_THROWS_AS(q::row_bytes(TH_DTYPE_F32, -1), std::invalid_argument);
  CHECK_THROWS_AS(q::row_bytes(TH_DTYPE_F32, std::numeric_limits<int64_t>::max()), std::invalid_argument);
  CHECK_THROWS_WITH(q::row_bytes(3, 32), Catch::Contains("q4_1") && Catch::Contains("not supported"));
  CHECK_THROWS_AS(q::block_bytes(TH_DTYPE_I8), std::invalid_argument);
  CHECK_THROWS_AS(q::block_elems(99), std::invalid_argument);

  CHECK(std::string(q::dtype_name(TH_DTYPE_F32)) == "f32");
  CHECK(std::string(q::dtype_name(TH_DTYPE_F16)) == "f16");
  CHECK(std::string(q::dtype_name(TH_DTYPE_BF16)) == "bf16");
  CHECK(std::string(q::dtype_name(TH_DTYPE_Q8_0)) == "q8_0");
  CHECK(std::string(q::dtype_name(TH_DTYPE_Q4_0)) == "q4_0");
  CHECK(std::string(q::dtype_name(TH_DTYPE_Q4_K)) == "q4_K");
  CHECK(std::string(q::dtype_name(TH_DTYPE_Q6_K)) == "q6_K");
  CHECK(std::string(q::dtype_name(3)) == "q4_1");
  CHECK(std::string(q::dtype_name(4)) == "unknown(4)");
  CHECK(std::string(q::dtype_name(-1)) == "unknown(-1)");
  CHECK(std::string(q::dtype_name(1000)) == "unknown(1000)");
  for (th_dtype t : kAllTypes) CHECK(q::is_supported(t));
  CHECK_FALSE(q::is_supported(3));
  CHECK_FALSE(q::is_supported(TH_DTYPE_I32));
  CHECK_FALSE(q::is_supported(-5));

  std::vector<float> x(48, 1.0f);
  std::vector<uint8_t> buf(1024);
  CHECK_THROWS_AS(q::quantize_row(TH_DTYPE_Q8_0, x.data(), buf.data(), 48), std::invalid_argument);
  CHECK_THROWS_AS(q::dequantize_row(TH_DTYPE_Q4_0, buf.data(), x.data(), 48), std::invalid_argument);
  CHECK_THROWS_AS(q::dequantize_row(2000, buf.data(), x.data(), 32), std::invalid_argument);
}

TEST_CASE("quant: fp16 special values", "[quant]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(q::f32_to_fp16(0.0f) == 0x0000);
  CHECK(q::f32_to_fp16(-0.0f) == 0x8000);
  CHECK(std::signbit(q::fp16_to_f32(0x8000)));
  CHECK(q::fp16_to_f32(0x8000) == 0.0f);
  CHECK(q::f32_to_fp16(1.0f) == 0x3C00);
  CHECK(q::f32_to_fp16(-2.0f) == 0xC000);
  CHECK(q::f32_to_fp16(inf) == 0x7C00);
  CHECK(q::f32_to_fp16(-inf) == 0xFC00);
  CHECK(q::fp16_to_f32(0x7C00) == inf);
  CHECK(q::fp16_to_f32(0xFC00) == -inf);
  const uint16_t nan_h = q::f32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan_h & 0x7C00) == 0x7C00);
  CHECK((nan_h & 0x03FF) != 0);
  CHECK(std::isnan(q::fp16_to_f32(0x7E00)));
  CHECK(std::isnan(q::fp16_to_f32(0x7C01)));  // signalling pattern: still a nan
  CHECK(std::isnan(q::fp16_to_f32(nan_h)));
  // A nan whose payload lies only in the low 13 bits must not become infinity.
  CHECK(std::isnan(q::fp16_to_f32(q::f32_to_fp16(std::bit_cast<float>(0x7F800001u)))));
  CHECK(std::signbit(q::fp16_to_f32(q::f32_to_fp16(-std::numeric_limits<float>::quiet_NaN()))));

  // largest finite, overflow (65520 is the tie between 65504 and 65536: to even = infinity)
  CHECK(q::fp16_to_f32(0x7BFF) == 65504.0f);
  CHECK(q::f32_to_fp16(65504.0f) == 0x7BFF);
  CHECK(q::f32_to_fp16(65519.996f) == 0x7BFF);
  CHECK(q::f32_to_fp16(65520.0f) == 0x7C00);
  CHECK(q::f32_to_fp16(-1e10f) == 0xFC00);
  // normals and subnormals
  CHECK(q::fp16_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(q::fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(q::fp16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(q::fp16_to_f32(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(q::f32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(q::f32_to_fp16(std::ldexp(1023.0f, -24)) == 0x03FF);
  CHECK(q::f32_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(q::f32_to_fp16(std::ldexp(2047.0f, -25)) == 0x0400);  // tie between 0x3FF and 0x400: even
  CHECK(q::f32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);     // tie between 0 and 0x0001: even
  CHECK(q::f32_to_fp16(std::ldexp(1.0f, -25) * 1.0000001f) == 0x0001);
  CHECK(q::f32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);     // tie between 1 and 2: even
  CHECK(q::f32_to_fp16(-std::ldexp(1.0f, -26)) == 0x8000);
  CHECK(q::f32_to_fp16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  // ties in the normal range
  CHECK(q::f32_to_fp16(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(q::f32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3C02);
  CHECK(q::f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);
  CHECK(q::f32_to_fp16(2047.5f) == q::f32_to_fp16(2048.0f));  // 2047.5 -> 2048 (even)
}

TEST_CASE("quant: fp16 and bf16 encodings round-trip exactly", "[quant]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = q::fp16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(q::fp16_to_f32(q::f32_to_fp16(f))));
      CHECK(((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0));
    } else if (q::f32_to_fp16(f) != h) {
      FAIL("fp16 " << h << " -> " << f << " -> " << q::f32_to_fp16(f));
    }
    const float g = q::bf16_to_f32(uint16_t(h));
    if (std::isnan(g)) {
      CHECK(std::isnan(q::bf16_to_f32(q::f32_to_bf16(g))));
    } else if (q::f32_to_bf16(g) != h) {
      FAIL("bf16 " << h << " -> " << g << " -> " << q::f32_to_bf16(g));
    }
  }
  CHECK(q::f32_to_bf16(1.0f) == 0x3F80);
  CHECK(q::f32_to_bf16(-0.0f) == 0x8000);
  CHECK(q::f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(std::isnan(q::bf16_to_f32(q::f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  CHECK(q::f32_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);  // tie: to even
  CHECK(q::f32_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);  // tie: to even
  CHECK(q::f32_to_bf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);
  CHECK(q::f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past the largest bf16
}

TEST_CASE("quant: f32 -> fp16 / bf16 rounds to the nearest value, ties to even", "[quant]") {
  const uint32_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  auto check_nearest = [](float x, uint16_t h, float (*to_f32)(uint16_t)) {
    // Compare with both neighbours of h in magnitude (h + 1 and h - 1 have the same sign).
    const double err = std::fabs(double(to_f32(h)) - x);
    for (int delta : {-1, 1}) {
      const int nb = int(h & 0x7FFF) + delta;
      if (nb < 0 || nb > 0x7C00) continue;
      const double other = std::fabs(double(to_f32(uint16_t((h & 0x8000) | nb))) - x);
      if (other < err || (other == err && (h & 1))) return false;
    }
    return true;
  };
  for (int i = 0; i < 200000; ++i) {
    float x = std::bit_cast<float>(bits(rng));
    if (!std::isfinite(x)) continue;
    if (std::fabs(x) < 65504.0f && !check_nearest(x, q::f32_to_fp16(x), q::fp16_to_f32)) {
      FAIL("fp16 of " << x << " is " << q::f32_to_fp16(x));
    }
    if (std::fabs(x) < 3.3e38f && !check_nearest(x, q::f32_to_bf16(x), q::bf16_to_f32)) {
      FAIL("bf16 of " << x << " is " << q::f32_to_bf16(x));
    }
    // the same for values spread over fp16's range, where the bit pattern above rarely lands
    x = std::ldexp(float(bits(rng) & 0xFFFFFF) / float(1 << 24), int(bits(rng) % 42) - 26);
    if (!check_nearest(x, q::f32_to_fp16(x), q::fp16_to_f32)) FAIL("fp16 of " << x << " is " << q::f32_to_fp16(x));
  }
}

TEST_CASE("quant: quantize -> dequantize stays within each type's bound", "[quant]") {
  const uint32_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (th_dtype t : kAllTypes) {
    for (float sigma : {1.0f, 0.02f}) {
      double se = 0, sx = 0;
      for (int r = 0; r < 24; ++r) {
        const int64_t n = 4096;
        std::vector<float> x = normal_row(rng, n, sigma);
        if (r == 1) x[7] = 6 * sigma;  // an outlier in a block
        if (r == 2) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero super-block
        if (r == 3) {
          for (float& v : x) v = std::fabs(v);  // one sign only (K quants: no min needed)
        }
        if (r == 4) {
          for (float& v : x) v = -std::fabs(v);
        }
        const std::vector<uint8_t> b = quantize(t, x);
        const std::vector<float> y = dequantize(t, b, n);
        const std::vector<double> bound = error_bounds(t, x);
        for (int64_t i = 0; i < n; ++i) {
          const double e = std::fabs(double(y[size_t(i)]) - x[size_t(i)]);
          if (!(e <= bound[size_t(i)])) {
            FAIL(q::dtype_name(t) << " sigma " << sigma << " row " << r << " element " << i << ": " << x[size_t(i)]
                                  << " -> " << y[size_t(i)] << ", error " << e << " > bound " << bound[size_t(i)]);
          }
          se += e * e;
          sx += double(x[size_t(i)]) * x[size_t(i)];
        }
        if (r == 2) {
          for (int i = 0; i < 256; ++i) REQUIRE(y[size_t(i)] == 0.0f);
        }
      }
      const double rel_rms = std::sqrt(se / sx);
      INFO(q::dtype_name(t) << " sigma " << sigma << ": relative rms error " << rel_rms);
      CHECK(rel_rms <= rms_bound(t));
      if (t == TH_DTYPE_F32) CHECK(rel_rms == 0.0);
    }
  }
}

TEST_CASE("quant: f16 and bf16 keep representable values exactly", "[quant]") {
  const uint32_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (th_dtype t : {TH_DTYPE_F16, TH_DTYPE_BF16}) {
    std::vector<float> x(1024);
    for (float& v : x) {
      do {
        const auto h = uint16_t(bits(rng));
        v = t == TH_DTYPE_F16 ? q::fp16_to_f32(h) : q::bf16_to_f32(h);
      } while (!std::isfinite(v));
    }
    const std::vector<float> y = dequantize(t, quantize(t, x), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(x[i]));
  }
}

TEST_CASE("quant: f16 rows (F16C where the CPU has it) convert each element as f32_to_fp16 / fp16_to_f32 do",
          "[quant]") {
  const uint32_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> bits;
  // Random bit patterns (every exponent: subnormals, overflow, inf, nan), f16 ties exactly, values near
  // them, and a length that leaves a tail after the 8-wide body.
  std::vector<float> x(1027);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = bits(rng);
    switch (i % 4) {
      case 0: x[i] = std::bit_cast<float>(u); break;
      case 1: x[i] = std::bit_cast<float>((u & 0x80001FFFu) | ((u % 40 + 100) << 23) | 0x1000u); break;  // tie
      case 2: x[i] = std::bit_cast<float>((u & 0x807FFFFFu) | ((u % 40 + 100) << 23)); break;
      default: x[i] = std::ldexp(float(u % 2048), int(u % 30) - 40); break;  // around the subnormals
    }
  }
  std::vector<uint8_t> h(2 * x.size());
  q::quantize_row(TH_DTYPE_F16, x.data(), h.data(), int64_t(x.size()));
  std::vector<float> back(x.size());
  q::dequantize_row(TH_DTYPE_F16, h.data(), back.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("element " << i << ": " << x[i]);
    uint16_t got;
    std::memcpy(&got, &h[2 * i], 2);
    const uint16_t want = q::f32_to_fp16(x[i]);
    if (std::isnan(x[i])) {
      CHECK((got & 0x7C00) == 0x7C00);  // a nan stays a nan (its payload bits may differ)
      CHECK((got & 0x3FF) != 0);
      CHECK(std::isnan(back[i]));
    } else {
      REQUIRE(got == want);
      REQUIRE(std::bit_cast<uint32_t>(back[i]) == std::bit_cast<uint32_t>(q::fp16_to_f32(want)));
    }
  }
}

TEST_CASE("quant: dot_row_reference", "[quant]") {
  const uint32_t seed = test_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (th_dtype t : kAllTypes) {
    const int64_t n = 2048;
    const std::vector<float> w = normal_row(rng, n, 1.0f);
    const std::vector<float> a = normal_row(rng, n, 1.0f);
    const std::vector<uint8_t> b = quantize(t, w);
    const std::vector<float> wq = dequantize(t, b, n);
    double dot_q = 0, dot_x = 0, bound = 0;
    const std::vector<double> eb = error_bounds(t, w);
    for (int64_t i = 0; i < n; ++i) {
      dot_q += double(wq[size_t(i)]) * a[size_t(i)];
      dot_x += double(w[size_t(i)]) * a[size_t(i)];
      bound += eb[size_t(i)] * std::fabs(a[size_t(i)]);
    }
    const double got = q::dot_row_reference(t, b.data(), a.data(), n);
    INFO(q::dtype_name(t) << ": dot " << got << ", of the dequantized row " << dot_q << ", of the original " << dot_x
                          << ", bound " << bound);
    CHECK(got == Approx(dot_q).epsilon(1e-12).margin(1e-12));
    CHECK(std::fabs(got - dot_x) <= bound + 1e-9);
  }
  CHECK(q::dot_row_reference(TH_DTYPE_Q8_0, nullptr, nullptr, 0) == 0.0);
  CHECK_THROWS_AS(q::dot_row_reference(TH_DTYPE_Q4_K, nullptr, nullptr, 32), std::invalid_argument);
}

namespace {

float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return q::fp16_to_f32(h);
}

// The layouts as ggml documents them, element by element (independent of quant.cpp's loops).
double q4_K_element(const uint8_t* blk, int e) {
  const uint8_t* s = blk + 4;
  const uint8_t* qs = blk + 16;
  const int j = e / 32, k = j % 4;
  const int sc = j < 4 ? s[k] & 63 : (s[k + 8] & 15) | ((s[k] >> 6) << 4);
  const int m = j < 4 ? s[k + 4] & 63 : (s[k + 8] >> 4) | ((s[k + 4] >> 6) << 4);
  const int c = e / 64, r = e % 64;
  const int nib = r < 32 ? qs[32 * c + r] & 15 : qs[32 * c + r - 32] >> 4;
  return double(f16(blk)) * sc * nib - double(f16(blk + 2)) * m;
}

double q6_K_element(const uint8_t* blk, int e) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  const int h = e / 128, r = e % 128, g = r / 32, l = r % 32;
  const int low = (ql[64 * h + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 15;
  const int high = (qh[32 * h + l] >> (2 * g)) & 3;
  return double(f16(blk + 208)) * sc[e / 16] * ((low | (high << 4)) - 32);
}

}  // namespace

TEST_CASE("quant: blocks decode in ggml's layout and element order", "[quant]") {
  SECTION("q8_0") {
    uint8_t blk[34];
    const uint16_t d = q::f32_to_fp16(0.5f);
    std::memcpy(blk, &d, 2);
    for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(int8_t(i - 16));
    float y[32];
    q::dequantize_row(TH_DTYPE_Q8_0, blk, y, 32);
    for (int i = 0; i < 32; ++i) CHECK(y[i] == 0.5f * float(i - 16));
    // ggml's quantize_row_q8_0_ref: d = amax / 127, q = round(x / d)
    float x[32];
    for (int i = 0; i < 32; ++i) x[i] = float(i);
    q::quantize_row(TH_DTYPE_Q8_0, x, blk, 32);
    CHECK(f16(blk) == q::fp16_to_f32(q::f32_to_fp16(31.0f / 127.0f)));
    for (int i = 0; i < 32; ++i) CHECK(int8_t(blk[2 + i]) == int(std::round(float(i) * (1.0f / (31.0f / 127.0f)))));
  }
  SECTION("q4_0") {
    uint8_t blk[18];
    const uint16_t d = q::f32_to_fp16(2.0f);
    std::memcpy(blk, &d, 2);
    for (int j = 0; j < 16; ++j) blk[2 + j] = uint8_t(j | ((15 - j) << 4));
    float y[32];
    q::dequantize_row(TH_DTYPE_Q4_0, blk, y, 32);
    for (int j = 0; j < 16; ++j) {
      CHECK(y[j] == 2.0f * float(j - 8));       // low nibbles: elements 0..15
      CHECK(y[j + 16] == 2.0f * float(7 - j));  // high nibbles: elements 16..31
    }
    // ggml's quantize_row_q4_0_ref: d = max / -8, so the largest magnitude lands on level 0 exactly
    float x[32] = {};
    x[5] = -4.0f;
    x[20] = 3.0f;
    q::quantize_row(TH_DTYPE_Q4_0, x, blk, 32);
    CHECK(f16(blk) == 0.5f);
    CHECK((blk[2 + 5] & 15) == 0);
    CHECK((blk[2 + 4] >> 4) == 14);  // element 20 (high nibble of byte 4): 3 / 0.5 + 8
    CHECK((blk[2 + 0] & 15) == 8);  // zeros: level 8
  }
  SECTION("q4_K and q6_K, random bytes") {
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> byte(0, 255);
    uint8_t k4[144], k6[210];
    for (uint8_t& b : k4) b = uint8_t(byte(rng));
    for (uint8_t& b : k6) b = uint8_t(byte(rng));
    const uint16_t d = q::f32_to_fp16(0.25f), dmin = q::f32_to_fp16(0.125f), d6 = q::f32_to_fp16(0.01f);
    std::memcpy(k4, &d, 2);
    std::memcpy(k4 + 2, &dmin, 2);
    std::memcpy(k6 + 208, &d6, 2);
    float y4[256], y6[256];
    q::dequantize_row(TH_DTYPE_Q4_K, k4, y4, 256);
    q::dequantize_row(TH_DTYPE_Q6_K, k6, y6, 256);
    for (int e = 0; e < 256; ++e) {
      CHECK(y4[e] == Approx(q4_K_element(k4, e)).margin(1e-4));
      CHECK(y6[e] == Approx(q6_K_element(k6, e)).margin(1e-5));
    }
  }
  SECTION("q4_K and q6_K quantizers write that layout") {
    std::mt19937 rng(777);
    const std::vector<float> x = normal_row(rng, 512, 1.0f);
    for (th_dtype t : {TH_DTYPE_Q4_K, TH_DTYPE_Q6_K}) {
      const std::vector<uint8_t> b = quantize(t, x);
      const std::vector<float> y = dequantize(t, b, 512);
      for (int e = 0; e < 512; ++e) {
        const uint8_t* blk = b.data() + (e / 256) * q::block_bytes(t);
        const double expect = t == TH_DTYPE_Q4_K ? q4_K_element(blk, e % 256) : q6_K_element(blk, e % 256);
        CHECK(y[size_t(e)] == Approx(expect).margin(1e-5));
      }
    }
  }
}

}  // namespace model_quant_tests
