// The vocabulary as plugins see it (th_vocab, ABI 1.11): the bytes each token stands for in generated
// text, built once per model and shared by every instance of its engines.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

class Tokenizer;

struct PluginVocab {
  std::string bytes;               // every token's bytes, one after the other
  std::vector<uint32_t> offsets;   // [n_tokens + 1]
  std::vector<uint8_t> attrs;      // TH_TOKEN_TEXT or TH_TOKEN_CONTROL
  int32_t eos = -1;
  // A bit per text token (bit t % 32 of word t / 32), derived from attrs once: what a constraint's
  // masks are cut to.
  std::vector<uint32_t> text_bits;
  // The ABI view; it points into this object, which must outlive it.
  th_vocab to_abi() const;
};

// Token t's bytes are Tokenizer::token_text(t) (what streaming appends for it); control, unknown and
// unused tokens, whose text is empty, are TH_TOKEN_CONTROL.
std::shared_ptr<const PluginVocab> plugin_vocab(const Tokenizer& tokenizer);
// A vocabulary of these tokens' bytes, "" for a control token (the conformance rules', tests').
std::shared_ptr<const PluginVocab> plugin_vocab(const std::vector<std::string>& texts, int32_t eos);

}  // namespace tokenhost
