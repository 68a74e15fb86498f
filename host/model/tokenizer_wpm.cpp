// WordPiece ("bert" vocabularies, as llama.cpp's llm_tokenizer_wpm): normalize (accents stripped and
// lower case unless the vocabulary says otherwise), split into words at whitespace and around every
// punctuation mark, ASCII symbol and CJK ideograph, then cover each word, prefixed with ▁ as the
// converted vocabularies write a word's start, by the longest token that matches at each position. A
// word that cannot be covered becomes one unknown token.
#include "model/tokenizer.hpp"

#include "model/unicode.hpp"

namespace tokenhost {

namespace {

// BERT's "Chinese characters": the CJK ideograph blocks (the last range as HuggingFace's tokenizers
// write it, which llama.cpp follows).
bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::vector<std::string> wordpiece_words(std::string_view text, bool lowercase, bool strip_accents) {
  using unicode::Cls;
  const unicode::CodePoints cps = unicode::decode_utf8(text);
  std::vector<std::string> words(1);
  for (uint32_t cp : cps.cps) {
    if (cp == unicode::kInvalid) continue;  // llama.cpp reads it as U+FFFD, which is dropped
    if (strip_accents) cp = unicode::nfd_first(cp);
    const Cls cls = unicode::classify(cp);
    if (cls == Cls::space) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || cls == Cls::control) continue;
    if (strip_accents && cls == Cls::mark) continue;
    std::string s;
    unicode::append_utf8(s, lowercase ? unicode::to_lower(cp) : cp);
    if (cls == Cls::punct || (cp < 0x7F && cls == Cls::symbol) || is_cjk_ideograph(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void Tokenizer::encode_wpm(std::string_view fragment, std::vector<int32_t>& out) const {
  static const std::string kWordStart = "\xE2\x96\x81";  // ▁
  for (const std::string& word : wordpiece_words(fragment, spec_.lowercase, spec_.strip_accents)) {
    const std::string marked = kWordStart + word;
    const size_t n = marked.size(), first = out.size();
    // Longest match first at each byte position; a position nothing matches discards the word.
    for (size_t i = 0; i < n;) {
      size_t j = std::min(n, i + max_token_bytes_);
      int32_t id = -1;
      for (; j > i; --j)
        if ((id = find_token(std::string_view(marked).substr(i, j - i))) >= 0) break;
      if (id < 0) {
        out.resize(first);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == first && spec_.unk >= 0) out.push_back(spec_.unk);
  }
}

}  // namespace tokenhost
