// Synthetic prompts of a target length. A prompt is words from a fixed list of 100 common, short
// English words, separated by single spaces, chosen by a seeded RNG. Such words are one token each
// in the usual BPE vocabularies (GPT, Llama, Qwen, Mistral) and the spaces merge into them, so N
// words is about N tokens; the exact count depends on the server's tokenizer (the report takes the
// server's usage.prompt_tokens when it sends one).
//
// Shared prefix: with fraction F, the first round(F * n) words of an n-word prompt are the first words
// of one sequence common to every request; the rest is drawn per request, and its first word differs
// from the common sequence's word at that position, so a prompt's prefix in common with the shared
// sequence is exactly round(F * n) words.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/distribution.hpp"

namespace tokenhost::loadgen {

std::span<const std::string_view> word_list();

struct Prompt {
  std::string text;
  uint32_t words = 0;         // the prompt's length in words (about its length in tokens)
  uint32_t shared_words = 0;  // how many of them are the shared prefix
  uint32_t max_tokens = 0;    // the output length drawn for it
  // A conversation's later turn: the turns before it, user and assistant texts alternating (a
  // completion's prompt is them and `text` joined; a chat request sends them as messages). Empty for
  // a conversation's first turn and for independent requests.
  std::vector<std::string> history;
};

class PromptGenerator {
 public:
  // shared_fraction in [0, 1] (throws std::invalid_argument otherwise).
  PromptGenerator(LengthDistribution prompt_tokens, LengthDistribution output_tokens, double shared_fraction, uint64_t seed);

  Prompt next();
  // A conversation's next user message: `words` words drawn afresh (none from the shared prefix), an
  // output length drawn as for next(). The caller sets its history.
  Prompt follow_up(const LengthDistribution& words);
  // A prompt of exactly `words` words, none from the shared prefix (a replayed request's), an output
  // length drawn as for next().
  Prompt of_length(uint32_t words);
  // The first n words of the shared sequence, joined by spaces.
  std::string shared_prefix(uint32_t n);

 private:
  void extend_shared(size_t n);

  LengthDistribution prompt_tokens_, output_tokens_;
  double shared_fraction_;
  std::mt19937_64 rng_, shared_rng_;
  std::vector<uint32_t> shared_;  // word indices, extended on demand
};

}  // namespace tokenhost::loadgen
