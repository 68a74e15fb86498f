// Token-count specs: the three forms parse and draw within their bounds; bad specs are refused with a
// message that says what is wrong.
#include <catch2/catch.hpp>

#include <cmath>

#include "harness.hpp"
#include "loadgen/distribution.hpp"

namespace loadgen_distribution_tests {

using namespace tokenhost::loadgen;
using tokenhost::testing::fresh_rng;

namespace {

std::string error_of(const std::string& spec) {
  try {
    parse_length_distribution(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("loadgen: token-count specs parse", "[loadgen]") {
  auto rng = fresh_rng("loadgen distribution parse");
  auto fixed = parse_length_distribution("128");
  CHECK(fixed.kind == LengthDistribution::Kind::fixed);
  CHECK(fixed.describe() == "128");
  for (int i = 0; i < 100; ++i) CHECK(fixed.sample(rng) == 128);

  auto uniform = parse_length_distribution("64:256");
  CHECK(uniform.kind == LengthDistribution::Kind::uniform);
  CHECK(uniform.describe() == "64:256");
  CHECK(uniform.mean() == 160);
  bool saw_lo = false, saw_hi = false;
  for (int i = 0; i < 20000; ++i) {
    uint32_t v = uniform.sample(rng);
    REQUIRE(v >= 64);
    REQUIRE(v <= 256);
    saw_lo = saw_lo || v == 64;
    saw_hi = saw_hi || v == 256;
  }
  CHECK(saw_lo);
  CHECK(saw_hi);
  CHECK(parse_length_distribution("7:7").sample(rng) == 7);

  auto normal = parse_length_distribution("normal:200:30.5");
  CHECK(normal.kind == LengthDistribution::Kind::normal);
  CHECK(normal.describe() == "normal:200:30.5");
  const int n = 20000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    double v = normal.sample(rng);
    sum += v;
    sq += v * v;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  CHECK(std::abs(mean - 200) < 6 * 30.5 / std::sqrt(n) + 0.5);
  CHECK(std::abs(sd - 30.5) < 1.5);
  // A wide normal is clamped at 1, never 0.
  auto wide = parse_length_distribution("normal:2:50");
  for (int i = 0; i < 1000; ++i) REQUIRE(wide.sample(rng) >= 1);
  CHECK(parse_length_distribution("normal:10:0").sample(rng) == 10);
}

TEST_CASE("loadgen: bad token-count specs say what is wrong", "[loadgen]") {
  CHECK(error_of("") == "empty token-count spec: expected N, LO:HI or normal:MEAN:SD");
  CHECK(error_of("abc") == "'abc': 'abc' is not a whole number (expected N, LO:HI or normal:MEAN:SD)");
  CHECK(error_of("12x") == "'12x': '12x' is not a whole number (expected N, LO:HI or normal:MEAN:SD)");
  CHECK(error_of("-5") == "'-5': '-5' is not a whole number (expected N, LO:HI or normal:MEAN:SD)");
  CHECK(error_of("0") == "'0': token counts must be in [1, 1000000]");
  CHECK(error_of("2000000") == "'2000000': token counts must be in [1, 1000000]");
  CHECK(error_of("256:64") == "'256:64': LO must not exceed HI");
  CHECK(error_of("64:") == "'64:': '' is not a whole number (expected N, LO:HI or normal:MEAN:SD)");
  CHECK(error_of("1:2:3") == "'1:2:3': '2:3' is not a whole number (expected N, LO:HI or normal:MEAN:SD)");
  CHECK(error_of("normal:100") == "'normal:100': expected normal:MEAN:SD");
  CHECK(error_of("normal:100:-5") == "'normal:100:-5': SD must not be negative");
  CHECK(error_of("normal:0.5:5") == "'normal:0.5:5': MEAN must be in [1, 1000000]");
  CHECK(error_of("normal:x:5") == "'normal:x:5': 'x' is not a number (expected N, LO:HI or normal:MEAN:SD)");
  CHECK(error_of("normal:nan:5") == "'normal:nan:5': 'nan' is not a number (expected N, LO:HI or normal:MEAN:SD)");
}

}  // namespace loadgen_distribution_tests
