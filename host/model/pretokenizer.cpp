// The pre-tokenizers: llama.cpp's regexes as passes over classified code points. Two kinds of pass:
// the GPT-2 and Llama 3 regexes, which llama.cpp also runs as hand-written code (and whose results
// differ from a regex engine's in corner cases we follow), and generic passes mirroring what
// std::regex does with the simpler ones (leftmost matches; the text between matches is a piece too).
#include "model/pretokenizer.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/unicode.hpp"
#include "util/text.hpp"

namespace tokenhost {

namespace {

using unicode::Cls;
using unicode::kInvalid;

struct Text {
  const unicode::CodePoints& cp;
  std::vector<Cls> cls;
  explicit Text(const unicode::CodePoints& c) : cp(c) {
    cls.reserve(c.cps.size());
    for (uint32_t x : c.cps) cls.push_back(unicode::classify(x));
  }
  uint32_t at(size_t i) const { return cp.cps[i]; }
};

// [^\s\p{L}\p{N}]
bool is_rest(Cls c) { return c != Cls::none && c != Cls::space && c != Cls::letter && c != Cls::number; }

// ---- The hand-written regexes. Each appends the end (code point index) of every piece of [begin, end).

// llama3 (max_digits 3) and qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Text& t, size_t begin, size_t end, size_t max_digits, std::vector<size_t>& ends) {
  auto cp = [&](size_t p) { return p < end ? t.at(p) : kInvalid; };
  auto cls = [&](size_t p) { return p < end ? t.cls[p] : Cls::none; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cp(pos);
    const Cls k = cls(pos);
    if (c == '\'' && pos + 1 < end) {
      const uint32_t n1 = unicode::to_lower(cp(pos + 1));
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        ends.push_back(pos += 2);
        continue;
      }
      const uint32_t n2 = pos + 2 < end ? unicode::to_lower(cp(pos + 2)) : kInvalid;
      if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
        ends.push_back(pos += 3);
        continue;
      }
    }
    if (c != '\r' && c != '\n' && k != Cls::number && (k == Cls::letter || cls(pos + 1) == Cls::letter)) {
      ++pos;
      while (cls(pos) == Cls::letter) ++pos;
      ends.push_back(pos);
      continue;
    }
    if (k == Cls::number) {
      const size_t start = pos;
      while (cls(pos) == Cls::number && pos - start < max_digits) ++pos;
      ends.push_back(pos);
      continue;
    }
    if (is_rest(c == ' ' ? cls(pos + 1) : k)) {
      if (c == ' ') ++pos;
      while (is_rest(cls(pos))) ++pos;
      while (cp(pos) == '\r' || cp(pos) == '\n') ++pos;
      ends.push_back(pos);
      continue;
    }
    size_t n = 0, last_newline = 0;
    while (cls(pos + n) == Cls::space) {
      if (cp(pos + n) == '\r' || cp(pos + n) == '\n') last_newline = pos + n + 1;
      ++n;
    }
    if (last_newline > 0) {
      pos = last_newline;  // \s*[\r\n]+
    } else if (n > 1 && pos + n < end) {
      pos += n - 1;  // \s+(?!\S): leave the last one to the next word
    } else {
      pos += std::max<size_t>(n, 1);
    }
    ends.push_back(pos);
  }
}

// gpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Text& t, size_t begin, size_t end, std::vector<size_t>& ends) {
  auto cp = [&](size_t p) { return p < end ? t.at(p) : kInvalid; };
  auto cls = [&](size_t p) { return p < end ? t.cls[p] : Cls::none; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cp(pos);
    if (c == '\'' && pos + 1 < end) {
      const uint32_t n1 = cp(pos + 1), n2 = cp(pos + 2);
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        ends.push_back(pos += 2);
        continue;
      }
      if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
        ends.push_back(pos += 3);
        continue;
      }
    }
    const Cls k = c == ' ' ? cls(pos + 1) : cls(pos);
    if (k == Cls::letter || k == Cls::number || is_rest(k)) {
      if (c == ' ') ++pos;
      while (k == Cls::letter || k == Cls::number ? cls(pos) == k : is_rest(cls(pos))) ++pos;
      ends.push_back(pos);
      continue;
    }
    size_t n = 0;
    while (cls(pos + n) == Cls::space) ++n;
    if (n > 1 && pos + n < end) {
      pos += n - 1;
    } else {
      pos += std::max<size_t>(n, 1);
    }
    ends.push_back(pos);
  }
}

// ---- Generic passes, as std::regex finds leftmost matches of simple patterns in a piece.

// X+ : runs where in(i) holds, and the runs between them.
template <typename In>
void split_runs(size_t begin, size_t end, In in, std::vector<size_t>& ends) {
  size_t pos = begin;
  while (pos < end) {
    const bool m = in(pos);
    while (pos < end && in(pos) == m) ++pos;
    ends.push_back(pos);
  }
}

// X : every code point where in(i) holds alone, the runs between them together.
template <typename In>
void split_each(size_t begin, size_t end, In in, std::vector<size_t>& ends) {
  size_t pos = begin;
  while (pos < end) {
    if (in(pos)) {
      ends.push_back(++pos);
      continue;
    }
    while (pos < end && !in(pos)) ++pos;
    ends.push_back(pos);
  }
}

// \s?X+ (X never holds a space): a match starts at a space followed by X, or at X.
template <typename In>
void split_space_runs(const Text& t, size_t begin, size_t end, In in, std::vector<size_t>& ends) {
  auto x = [&](size_t i) { return i < end && in(i); };
  size_t pos = begin, gap = begin;
  while (pos < end) {
    size_t start = pos;
    if (t.cls[pos] == Cls::space && x(pos + 1)) {
      ++pos;
    } else if (!x(pos)) {
      ++pos;
      continue;
    }
    while (x(pos)) ++pos;
    if (start > gap) ends.push_back(start);
    ends.push_back(gap = pos);
  }
  if (gap < end) ends.push_back(end);
}

// \s+$ : the piece's trailing whitespace.
void split_trailing_space(const Text& t, size_t begin, size_t end, std::vector<size_t>& ends) {
  size_t start = end;
  while (start > begin && t.cls[start - 1] == Cls::space) --start;
  if (start > begin) ends.push_back(start);
  if (end > start) ends.push_back(end);
}

// [0-9][0-9][0-9] : leftmost triples of ASCII digits.
void split_digit_triples(const Text& t, size_t begin, size_t end, std::vector<size_t>& ends) {
  auto digit = [&](size_t i) { return i < end && t.at(i) >= '0' && t.at(i) <= '9'; };
  size_t pos = begin, last = begin;
  while (pos < end) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      if (pos > last) ends.push_back(pos);
      ends.push_back(last = pos += 3);
    } else {
      ++pos;
    }
  }
  if (last < end) ends.push_back(end);
}

struct Range {
  uint32_t lo, hi;
};

template <size_t N>
bool in_ranges(const Range (&ranges)[N], uint32_t cp) {
  return std::any_of(std::begin(ranges), std::end(ranges), [&](const Range& r) { return cp >= r.lo && cp <= r.hi; });
}

// deepseek-llm's letters: Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic,
// full-width Latin, Deseret, Osage, Old Hungarian, Warang Citi, Adlam, and letter-like symbols.
constexpr Range kDeepseekLetters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107},
    {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
    {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F},
    {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// deepseek-llm's punctuation: ASCII's printable non-alphanumerics and letters from ':' on (the class
// is written [!-/:-~...]), their full-width forms, curly quotes, the ideographic space, comma and stop.
constexpr Range kDeepseekPunct[] = {{0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
                                    {0x2018, 0x201F}, {0x3000, 0x3002}};
// Both deepseek pre-tokenizers' [一-龥ࠀ-一가-퟿]: U+0800..U+9FA5 and U+AC00..U+D7FF.
constexpr Range kDeepseekCjk[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

using Pass = void (*)(const Text&, size_t, size_t, std::vector<size_t>&);

// A regex pass over code points: whitespace other than ASCII's never matches a class written with
// code points (llama.cpp replaces it by \v before std::regex sees the text).
template <const auto& ranges>
bool in_class(const Text& t, size_t i) {
  return t.cls[i] != Cls::space && in_ranges(ranges, t.at(i));
}

// [\p{P}\$\+<=>\^~\|] (default) and with ` (falcon)
bool punct_or_default_symbol(const Text& t, size_t i) {
  const uint32_t c = t.at(i);
  return t.cls[i] == Cls::punct || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
         c == '~' || c == '|';
}

const Pass kPassGpt2 = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) { split_gpt2(t, b, e, out); };
const Pass kPassLlama3 = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) { split_llama3(t, b, e, 3, out); };
const Pass kPassQwen2 = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) { split_llama3(t, b, e, 1, out); };
const Pass kPassDigitTriples = split_digit_triples;
const Pass kPassTrailingSpace = split_trailing_space;
const Pass kPassNewlines = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_each(b, e, [&](size_t i) { return t.at(i) == '\r' || t.at(i) == '\n'; }, out);
};
const Pass kPassNumberRuns = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_runs(b, e, [&](size_t i) { return t.cls[i] == Cls::number; }, out);
};
const Pass kPassEachNumber = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_each(b, e, [&](size_t i) { return t.cls[i] == Cls::number; }, out);
};
const Pass kPassDefaultPunct = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_runs(b, e, [&](size_t i) { return punct_or_default_symbol(t, i); }, out);
};
const Pass kPassFalconPunct = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_runs(b, e, [&](size_t i) { return punct_or_default_symbol(t, i) || t.at(i) == '`'; }, out);
};
const Pass kPassCjkRuns = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_runs(b, e, [&](size_t i) { return in_class<kDeepseekCjk>(t, i); }, out);
};
const Pass kPassDeepseekLetters = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_space_runs(t, b, e, [&](size_t i) { return in_class<kDeepseekLetters>(t, i); }, out);
};
const Pass kPassDeepseekPunct = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_space_runs(t, b, e, [&](size_t i) { return in_class<kDeepseekPunct>(t, i); }, out);
};
const Pass kPassSpaceLetters = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_space_runs(t, b, e, [&](size_t i) { return t.cls[i] == Cls::letter; }, out);
};
const Pass kPassSpacePunct = [](const Text& t, size_t b, size_t e, std::vector<size_t>& out) {
  split_space_runs(t, b, e, [&](size_t i) { return t.cls[i] == Cls::punct; }, out);
};

std::vector<Pass> passes_of(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::default_bpe: return {kPassDefaultPunct, kPassGpt2, kPassNumberRuns, kPassDigitTriples};
    case PreTokenizer::gpt2: return {kPassGpt2};
    case PreTokenizer::llama3: return {kPassLlama3};
    case PreTokenizer::qwen2: return {kPassQwen2};
    case PreTokenizer::falcon: return {kPassFalconPunct, kPassGpt2, kPassDigitTriples};
    case PreTokenizer::starcoder: return {kPassEachNumber, kPassGpt2};
    case PreTokenizer::deepseek_llm:
      return {kPassNewlines, kPassDeepseekLetters, kPassDeepseekPunct, kPassTrailingSpace, kPassCjkRuns,
              kPassNumberRuns};
    case PreTokenizer::deepseek_coder:
      return {kPassNewlines, kPassSpaceLetters, kPassSpacePunct, kPassCjkRuns, kPassEachNumber};
  }
  return {};
}

struct Name {
  const char* name;
  PreTokenizer kind;
};

// llama.cpp's tokenizer.ggml.pre names for the pre-tokenizers above.
constexpr Name kNames[] = {
    {"default", PreTokenizer::default_bpe},
    {"gpt2", PreTokenizer::gpt2}, {"gpt-2", PreTokenizer::gpt2}, {"mpt", PreTokenizer::gpt2},
    {"olmo", PreTokenizer::gpt2}, {"jais", PreTokenizer::gpt2}, {"phi-2", PreTokenizer::gpt2},
    {"jina-es", PreTokenizer::gpt2}, {"jina-de", PreTokenizer::gpt2}, {"jina-v1-en", PreTokenizer::gpt2},
    {"jina-v2-es", PreTokenizer::gpt2}, {"jina-v2-de", PreTokenizer::gpt2},
    {"jina-v2-code", PreTokenizer::gpt2}, {"roberta-bpe", PreTokenizer::gpt2},
    {"gigachat", PreTokenizer::gpt2}, {"exaone4", PreTokenizer::gpt2},
    {"llama3", PreTokenizer::llama3}, {"llama-bpe", PreTokenizer::llama3}, {"llama-v3", PreTokenizer::llama3},
    {"falcon3", PreTokenizer::llama3},
    {"qwen2", PreTokenizer::qwen2}, {"deepseek-r1-qwen", PreTokenizer::qwen2},
    {"falcon", PreTokenizer::falcon},
    {"starcoder", PreTokenizer::starcoder}, {"refact", PreTokenizer::starcoder},
    {"command-r", PreTokenizer::starcoder}, {"smollm", PreTokenizer::starcoder},
    {"codeshell", PreTokenizer::starcoder}, {"exaone", PreTokenizer::starcoder},
    {"minerva-7b", PreTokenizer::starcoder},
    {"deepseek-llm", PreTokenizer::deepseek_llm}, {"deepseek-coder", PreTokenizer::deepseek_coder},
};

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view pre) {
  if (pre.empty()) return PreTokenizer::default_bpe;
  std::vector<std::string> known;
  for (const Name& n : kNames) {
    if (pre == n.name) return n.kind;
    known.emplace_back(n.name);
  }
  throw std::invalid_argument("tokenizer: unknown pre-tokenizer '" + std::string(pre) + "'" + suggestion(pre, known));
}

std::vector<std::string> pretokenize(PreTokenizer kind, std::string_view text) {
  const unicode::CodePoints cps = unicode::decode_utf8(text);
  const Text t(cps);
  const size_t n = cps.cps.size();
  if (n == 0) return {};
  std::vector<size_t> ends{n}, next;
  for (Pass pass : passes_of(kind)) {
    next.clear();
    size_t begin = 0;
    for (size_t e : ends) {
      pass(t, begin, e, next);
      begin = e;
    }
    ends.swap(next);
  }
  std::vector<std::string> words;
  words.reserve(ends.size());
  size_t begin = 0;
  for (size_t e : ends) {
    if (e > begin) words.emplace_back(text.substr(cps.offsets[begin], cps.offsets[e] - cps.offsets[begin]));
    begin = e;
  }
  return words;
}

}  // namespace tokenhost
