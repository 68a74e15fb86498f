// The tokenizers on arbitrary text: SentencePiece with byte fallback (without user-defined tokens its
// decode gives the text back; after one, llama.cpp's rule adds a space prefix to the next fragment)
// byte-level BPE with the llama3 pre-tokenizer and WordPiece; special-token parsing on and off. Every
// pre-tokenizer's words concatenate back to the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/tokenizer.hpp"

namespace {

using tokenhost::Tokenizer;
using tokenhost::TokenizerSpec;
using tokenhost::TokenType;

Tokenizer make_spm(bool user_defined) {
  TokenizerSpec s;
  s.model = "llama";
  auto add = [&](std::string text, TokenType type, float score) {
    s.tokens.push_back(std::move(text));
    s.token_types.push_back(int32_t(type));
    s.scores.push_back(score);
  };
  add("<unk>", TokenType::unknown, 0);
  add("<s>", TokenType::control, 0);
  add("</s>", TokenType::control, 0);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, TokenType::byte, 0);
  }
  float score = -1;
  for (const char* piece : {"\xe2\x96\x81", "\xe2\x96\x81t", "h", "e", "he", "\xe2\x96\x81the", "a", "b", "ab", "\xe2\x96\x81" "a"})
    add(piece, TokenType::normal, score -= 0.5f);
  if (user_defined) add("<|user|>", TokenType::user_defined, 0);
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  return Tokenizer(s);
}

Tokenizer make_bpe() {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = "llama3";
  for (int b = 0; b < 256; ++b) {
    s.tokens.push_back(tokenhost::gpt2_byte_encode(std::string(1, char(b))));
    s.token_types.push_back(int32_t(TokenType::normal));
  }
  const std::string space = tokenhost::gpt2_byte_encode(" ");
  for (const std::string t : {space + "t", std::string("he"), space + "the", std::string("in"), space + "in"}) {
    s.tokens.push_back(t);
    s.token_types.push_back(int32_t(TokenType::normal));
  }
  s.merges = {space + " t", "h e", space + "t he", "i n", space + " in"};
  s.tokens.push_back("<|begin_of_text|>");
  s.token_types.push_back(int32_t(TokenType::control));
  s.bos = int32_t(s.tokens.size()) - 1;
  s.add_bos = true;
  return Tokenizer(s);
}

Tokenizer make_wpm() {
  TokenizerSpec s;
  s.model = "bert";
  for (const char* t : {"[UNK]", "[CLS]", "\xe2\x96\x81" "hello", "\xe2\x96\x81" "h", "ello", "\xe2\x96\x81" ",", "\xe2\x96\x81" "a", "a"}) {
    s.tokens.push_back(t);
    s.token_types.push_back(int32_t(TokenType::normal));
  }
  s.token_types[0] = int32_t(TokenType::unknown);
  s.token_types[1] = int32_t(TokenType::control);
  s.unk = 0;
  return Tokenizer(s);
}

// Whether text is well-formed UTF-8. The SentencePiece splitter, as llama.cpp's, takes a lead byte's
// length without checking what follows, so a broken sequence may swallow the next character's bytes:
// the round trip holds for well-formed text only (and text without U+2581, below).
bool valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > text.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer spm = make_spm(false);
  static const Tokenizer spm_user = make_spm(true);
  static const Tokenizer bpe = make_bpe();
  static const Tokenizer wpm = make_wpm();
  const std::string text(reinterpret_cast<const char*>(data), size);
  using tokenhost::PreTokenizer;
  for (PreTokenizer kind : {PreTokenizer::default_bpe, PreTokenizer::gpt2, PreTokenizer::llama3, PreTokenizer::qwen2,
                            PreTokenizer::falcon, PreTokenizer::starcoder, PreTokenizer::deepseek_llm,
                            PreTokenizer::deepseek_coder}) {
    std::string joined;
    for (const std::string& word : tokenhost::pretokenize(kind, text)) {
      if (word.empty()) {
        std::fprintf(stderr, "pre-tokenizer %d made an empty word\n", int(kind));
        std::abort();
      }
      joined += word;
    }
    if (joined != text) {
      std::fprintf(stderr, "pre-tokenizer %d lost text\n", int(kind));
      std::abort();
    }
  }
  // "▁" (U+2581) is SentencePiece's escaped space: a literal one decodes as a space, as in llama.cpp.
  const bool well_formed = valid_utf8(text) && text.find("\xe2\x96\x81") == std::string::npos;
  for (const Tokenizer* t : {&spm, &spm_user, &bpe, &wpm}) {
    for (bool special : {false, true}) {
      const auto ids = t->encode(text, true, special);
      const std::string back = t->decode(ids);
      for (int32_t id : ids) (void)t->token_text(id);
      // SentencePiece with byte fallback loses nothing of well-formed text.
      if (t == &spm && !special && well_formed && back != text) {
        std::fprintf(stderr, "round trip lost text:\n  in: ");
        for (unsigned char c : text) std::fprintf(stderr, "%02x", c);
        std::fprintf(stderr, "\n  out: ");
        for (unsigned char c : back) std::fprintf(stderr, "%02x", c);
        std::fprintf(stderr, "\n");
        std::abort();
      }
    }
  }
  return 0;
}
