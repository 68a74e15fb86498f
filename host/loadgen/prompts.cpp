#include "loadgen/prompts.hpp"

#include <array>
#include <cmath>
#include <stdexcept>

namespace tokenhost::loadgen {
namespace {

constexpr std::array<std::string_view, 100> kWords = {
    "the",   "of",    "and",   "to",    "in",    "is",    "was",   "for",   "on",    "with",  "as",    "by",
    "at",    "from",  "his",   "her",   "they",  "we",    "you",   "this",  "that",  "which", "one",   "all",
    "were",  "when",  "there", "can",   "more",  "other", "time",  "some",  "what",  "out",   "up",    "about",
    "into",  "than",  "them",  "only",  "new",   "like",  "over",  "such",  "after", "first", "also",  "made",
    "well",  "years", "way",   "many",  "then",  "these", "would", "two",   "long",  "day",   "great", "world",
    "old",   "man",   "state", "water", "house", "light", "city",  "small", "high",  "place", "people", "work",
    "life",  "part",  "hand",  "eyes",  "home",  "name",  "line",  "night", "school", "music", "story", "stone",
    "river", "green", "black", "white", "early", "young", "north", "south", "book",  "game",  "party", "field",
    "power", "money", "table", "color"};

}  // namespace

std::span<const std::string_view> word_list() { return kWords; }

PromptGenerator::PromptGenerator(LengthDistribution prompt_tokens, LengthDistribution output_tokens, double shared_fraction,
                                 uint64_t seed)
    : prompt_tokens_(prompt_tokens),
      output_tokens_(output_tokens),
      shared_fraction_(shared_fraction),
      rng_(seed),
      shared_rng_(seed ^ 0x9e3779b97f4a7c15ULL) {
  if (!(shared_fraction >= 0 && shared_fraction <= 1)) throw std::invalid_argument("shared-prefix fraction must be in [0, 1]");
}

void PromptGenerator::extend_shared(size_t n) {
  std::uniform_int_distribution<uint32_t> pick(0, uint32_t(kWords.size() - 1));
  while (shared_.size() < n) shared_.push_back(pick(shared_rng_));
}

std::string PromptGenerator::shared_prefix(uint32_t n) {
  extend_shared(n);
  std::string s;
  for (uint32_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[shared_[i]];
  }
  return s;
}

Prompt PromptGenerator::follow_up(const LengthDistribution& words) {
  Prompt p;
  p.words = words.sample(rng_);
  p.max_tokens = output_tokens_.sample(rng_);
  std::uniform_int_distribution<uint32_t> pick(0, uint32_t(kWords.size() - 1));
  for (uint32_t i = 0; i < p.words; ++i) {
    if (i) p.text += ' ';
    p.text += kWords[pick(rng_)];
  }
  return p;
}

Prompt PromptGenerator::next() {
  Prompt p;
  p.words = prompt_tokens_.sample(rng_);
  p.max_tokens = output_tokens_.sample(rng_);
  p.shared_words = uint32_t(std::lround(shared_fraction_ * p.words));
  extend_shared(size_t(p.shared_words) + 1);
  std::uniform_int_distribution<uint32_t> pick(0, uint32_t(kWords.size() - 1));
  std::uniform_int_distribution<uint32_t> pick_other(0, uint32_t(kWords.size() - 2));
  for (uint32_t i = 0; i < p.words; ++i) {
    uint32_t w;
    if (i < p.shared_words) {
      w = shared_[i];
    } else if (i == p.shared_words) {
      w = pick_other(rng_);  // any word but the shared sequence's at this position
      if (w >= shared_[i]) ++w;
    } else {
      w = pick(rng_);
    }
    if (i) p.text += ' ';
    p.text += kWords[w];
  }
  return p;
}

Prompt PromptGenerator::of_length(uint32_t words) {
  Prompt p;
  p.words = words;
  p.max_tokens = output_tokens_.sample(rng_);
  std::uniform_int_distribution<uint32_t> pick(0, uint32_t(kWords.size() - 1));
  for (uint32_t i = 0; i < words; ++i) {
    if (i) p.text += ' ';
    p.text += kWords[pick(rng_)];
  }
  return p;
}

}  // namespace tokenhost::loadgen
