#include "loadgen/distribution.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace tokenhost::loadgen {
namespace {

constexpr const char* kForms = "expected N, LO:HI or normal:MEAN:SD";

[[noreturn]] void fail(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("'" + spec + "': " + why);
}

uint32_t parse_count(const std::string& spec, const std::string& text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail(spec, "'" + text + "' is not a whole number (" + kForms + ")");
  if (v < 1 || v > kMaxTokenCount) fail(spec, "token counts must be in [1, " + std::to_string(kMaxTokenCount) + "]");
  return uint32_t(v);
}

double parse_real(const std::string& spec, const std::string& text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    fail(spec, "'" + text + "' is not a number (" + kForms + ")");
  return v;
}

std::string number(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

LengthDistribution parse_length_distribution(const std::string& spec) {
  if (spec.empty()) throw std::invalid_argument(std::string("empty token-count spec: ") + kForms);
  LengthDistribution d;
  if (spec.rfind("normal:", 0) == 0) {
    std::string rest = spec.substr(7);
    auto colon = rest.find(':');
    if (colon == std::string::npos) fail(spec, "expected normal:MEAN:SD");
    d.kind = LengthDistribution::Kind::normal;
    d.a = parse_real(spec, rest.substr(0, colon));
    d.b = parse_real(spec, rest.substr(colon + 1));
    if (d.a < 1 || d.a > kMaxTokenCount) fail(spec, "MEAN must be in [1, " + std::to_string(kMaxTokenCount) + "]");
    if (d.b < 0) fail(spec, "SD must not be negative");
    return d;
  }
  auto colon = spec.find(':');
  if (colon == std::string::npos) {
    d.kind = LengthDistribution::Kind::fixed;
    d.a = d.b = parse_count(spec, spec);
    return d;
  }
  d.kind = LengthDistribution::Kind::uniform;
  d.a = parse_count(spec, spec.substr(0, colon));
  d.b = parse_count(spec, spec.substr(colon + 1));
  if (d.a > d.b) fail(spec, "LO must not exceed HI");
  return d;
}

uint32_t LengthDistribution::sample(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::fixed:
      return uint32_t(a);
    case Kind::uniform:
      return std::uniform_int_distribution<uint32_t>(uint32_t(a), uint32_t(b))(rng);
    case Kind::normal: {
      double v = b > 0 ? std::normal_distribution<double>(a, b)(rng) : a;
      return uint32_t(std::clamp(std::round(v), 1.0, double(kMaxTokenCount)));
    }
  }
  return 1;
}

double LengthDistribution::mean() const {
  switch (kind) {
    case Kind::fixed:
      return a;
    case Kind::uniform:
      return (a + b) / 2;
    case Kind::normal:
      return a;
  }
  return a;
}

std::string LengthDistribution::describe() const {
  switch (kind) {
    case Kind::fixed:
      return number(a);
    case Kind::uniform:
      return number(a) + ":" + number(b);
    case Kind::normal:
      return "normal:" + number(a) + ":" + number(b);
  }
  return "";
}

}  // namespace tokenhost::loadgen
