// Synthetic prompts: lengths follow the spec in words from the word list, and with a shared-prefix
// fraction F every prompt starts with exactly round(F * n) words of one common sequence (the next word
// differs from it), while the rest differs between prompts.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "loadgen/prompts.hpp"

namespace loadgen_prompts_tests {

using namespace tokenhost::loadgen;
using tokenhost::testing::fresh_rng;

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

size_t common_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

TEST_CASE("loadgen: prompts share exactly the shared-prefix fraction", "[loadgen]") {
  auto rng = fresh_rng("loadgen shared prefix");
  const std::set<std::string> vocabulary(word_list().begin(), word_list().end());
  REQUIRE(vocabulary.size() == word_list().size());  // no word twice
  for (double fraction : {0.0, 0.25, 0.5, 0.9, 1.0, std::uniform_real_distribution<double>(0, 1)(rng)}) {
    const uint32_t lo = std::uniform_int_distribution<uint32_t>(1, 50)(rng);
    const uint32_t hi = lo + std::uniform_int_distribution<uint32_t>(0, 400)(rng);
    PromptGenerator gen(parse_length_distribution(std::to_string(lo) + ":" + std::to_string(hi)),
                        parse_length_distribution("16"), fraction, rng());
    const auto shared = words(gen.shared_prefix(hi + 1));
    REQUIRE(shared.size() == hi + 1);
    std::vector<Prompt> prompts;
    for (int i = 0; i < 200; ++i) prompts.push_back(gen.next());
    INFO("fraction " << fraction << ", lengths " << lo << ":" << hi);
    size_t different_tails = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Prompt& p = prompts[i];
      const auto w = words(p.text);
      REQUIRE(w.size() == p.words);
      REQUIRE(p.words >= lo);
      REQUIRE(p.words <= hi);
      REQUIRE(p.max_tokens == 16);
      REQUIRE(p.shared_words == uint32_t(std::lround(fraction * p.words)));
      for (const auto& x : w) REQUIRE(vocabulary.count(x) == 1);
      // Exactly the shared prefix in common with the shared sequence: not one word more.
      REQUIRE(common_prefix(w, shared) == p.shared_words);
      if (i > 0) {
        const auto prev = words(prompts[i - 1].text);
        const size_t both = std::min(p.shared_words, prompts[i - 1].shared_words);
        REQUIRE(common_prefix(w, prev) >= both);
        different_tails += common_prefix(w, prev) == both;
      }
    }
    // The unique parts differ from each other (a tie of their first words has chance 1/100 each).
    if (fraction < 1.0) CHECK(different_tails >= 150);
  }
}

TEST_CASE("loadgen: the same seed gives the same prompts", "[loadgen]") {
  auto make = [] { return PromptGenerator(parse_length_distribution("normal:64:16"), parse_length_distribution("8:32"), 0.3, 99); };
  PromptGenerator a = make(), b = make();
  for (int i = 0; i < 50; ++i) {
    Prompt x = a.next(), y = b.next();
    CHECK(x.text == y.text);
    CHECK(x.max_tokens == y.max_tokens);
  }
  CHECK_THROWS_AS(PromptGenerator(parse_length_distribution("8"), parse_length_distribution("8"), 1.5, 1), std::invalid_argument);
}

}  // namespace loadgen_prompts_tests
