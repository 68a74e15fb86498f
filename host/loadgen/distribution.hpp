// Token-count distributions for synthetic prompts and output lengths, written as
//   N               every draw is N
//   LO:HI           uniform integers in [LO, HI]
//   normal:MEAN:SD  a normal draw rounded to the nearest integer, clamped to [1, kMaxTokenCount]
// Every count is at least 1 and at most kMaxTokenCount.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace tokenhost::loadgen {

inline constexpr uint32_t kMaxTokenCount = 1'000'000;

struct LengthDistribution {
  enum class Kind { fixed, uniform, normal };
  Kind kind = Kind::fixed;
  double a = 1;  // fixed: the count; uniform: LO; normal: MEAN
  double b = 1;  // uniform: HI; normal: SD

  uint32_t sample(std::mt19937_64& rng) const;
  double mean() const;
  std::string describe() const;  // the spec in canonical form
};

// Parses a spec; throws std::invalid_argument whose message quotes the spec and says what is wrong.
LengthDistribution parse_length_distribution(const std::string& spec);

}  // namespace tokenhost::loadgen
