// Byte-level BPE ("gpt2" tokenizers: Llama 3, Qwen2, GPT-2): GPT-2's byte to code point mapping, the
// pre-tokenizers (llama.cpp's hand-written versions of the regexes, over a small code point classifier
// instead of full Unicode tables), and merging by rank.
#include <array>
#include <stdexcept>

#include "model/tokenizer.hpp"

#include "model/symbol_merge.hpp"
#include "util/text.hpp"

namespace tokenhost {

namespace {

// ---- GPT-2 byte mapping: printable bytes map to themselves, the other 68 to U+0100.. in byte order.

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

struct ByteMap {
  std::array<std::string, 256> encode;  // byte -> UTF-8 of its code point
  std::array<int16_t, 0x200> decode;    // code point -> byte, or -1
  ByteMap() {
    decode.fill(-1);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      append_utf8(encode[b], cp);
      decode[cp] = int16_t(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// ---- UTF-8 decoding that keeps every byte: an invalid byte becomes a one-byte unit.

constexpr uint32_t kInvalid = 0xFFFFFFFF;

struct CodePoints {
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;  // byte offset of each code point, plus the text's size
};

CodePoints decode_utf8(std::string_view s) {
  CodePoints r;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const uint8_t cc = uint8_t(s[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    r.offsets.push_back(i);
    if (ok) {
      r.cps.push_back(cp);
      i += n;
    } else {
      r.cps.push_back(kInvalid);
      i += 1;
    }
  }
  r.offsets.push_back(s.size());
  return r;
}

// ---- A small code point classifier: exact for ASCII, a table of ranges above.

enum class Cls : uint8_t { none, letter, number, space, punct, symbol, mark, other };

bool in(uint32_t cp, uint32_t lo, uint32_t hi) { return cp >= lo && cp <= hi; }

Cls classify(uint32_t cp) {
  if (cp == kInvalid) return Cls::symbol;
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return Cls::letter;
    if (cp >= '0' && cp <= '9') return Cls::number;
    if (cp == ' ' || in(cp, 0x09, 0x0D)) return Cls::space;
    if (cp < 0x20 || cp == 0x7F) return Cls::other;
    switch (cp) {
      case '$': case '+': case '<': case '=': case '>': case '^': case '`': case '|': case '~':
        return Cls::symbol;
      default:
        return Cls::punct;
    }
  }
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || in(cp, 0x2000, 0x200A) || cp == 0x2028 || cp == 0x2029 ||
      cp == 0x202F || cp == 0x205F || cp == 0x3000)
    return Cls::space;
  if (cp < 0xA0) return Cls::other;  // C1 controls
  if (cp < 0xC0) {
    switch (cp) {
      case 0xAA: case 0xB5: case 0xBA: return Cls::letter;
      case 0xB2: case 0xB3: case 0xB9: case 0xBC: case 0xBD: case 0xBE: return Cls::number;
      case 0xA1: case 0xA7: case 0xAB: case 0xB6: case 0xB7: case 0xBB: case 0xBF: return Cls::punct;
      case 0xAD: return Cls::other;
      default: return Cls::symbol;
    }
  }
  if (cp == 0xD7 || cp == 0xF7) return Cls::symbol;
  if (in(cp, 0x0300, 0x036F) || in(cp, 0x1AB0, 0x1AFF) || in(cp, 0x1DC0, 0x1DFF) || in(cp, 0x20D0, 0x20FF) ||
      in(cp, 0xFE00, 0xFE0F) || in(cp, 0xFE20, 0xFE2F) || in(cp, 0xE0100, 0xE01EF))
    return Cls::mark;
  if (in(cp, 0x0660, 0x0669) || in(cp, 0x06F0, 0x06F9) || in(cp, 0x0966, 0x096F) || in(cp, 0xFF10, 0xFF19) ||
      cp == 0x2070 || in(cp, 0x2074, 0x2079) || in(cp, 0x2080, 0x2089) || in(cp, 0x2150, 0x218F) ||
      in(cp, 0x2460, 0x249B) || in(cp, 0x3021, 0x3029))
    return Cls::number;
  if (in(cp, 0x200B, 0x200F) || in(cp, 0x2060, 0x206F) || in(cp, 0xD800, 0xF8FF) || cp >= 0xF0000 ||
      cp == 0xFEFF)
    return Cls::other;  // format characters, surrogates, private use
  if (in(cp, 0x2010, 0x2027) || in(cp, 0x2030, 0x205E) || in(cp, 0x2E00, 0x2E7F) || in(cp, 0x3001, 0x3003) ||
      in(cp, 0x3008, 0x3020) || cp == 0x3030 || cp == 0x303D || in(cp, 0xFE10, 0xFE1F) ||
      in(cp, 0xFE30, 0xFE6F) || in(cp, 0xFF01, 0xFF0F) || in(cp, 0xFF1A, 0xFF20) || in(cp, 0xFF3B, 0xFF40) ||
      in(cp, 0xFF5B, 0xFF65))
    return Cls::punct;
  if (in(cp, 0x20A0, 0x20CF) || in(cp, 0x2190, 0x245F) || in(cp, 0x249C, 0x2BFF) || in(cp, 0xFFF0, 0xFFFF) ||
      in(cp, 0x1F000, 0x1FBFF))
    return Cls::symbol;  // currency, arrows, maths, box drawing, shapes, dingbats, emoji
  return Cls::letter;
}

// [^\s\p{L}\p{N}]
bool is_rest(Cls c) { return c != Cls::none && c != Cls::space && c != Cls::letter && c != Cls::number; }

uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// ---- Splitters: each appends the end (code point index) of every piece of [begin, end).

struct Text {
  const CodePoints& cp;
  std::vector<Cls> cls;
  explicit Text(const CodePoints& c) : cp(c) {
    cls.reserve(c.cps.size());
    for (uint32_t x : c.cps) cls.push_back(classify(x));
  }
};

// llama3 (max_digits 3) and qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Text& t, size_t begin, size_t end, size_t max_digits, std::vector<size_t>& ends) {
  auto cp = [&](size_t p) { return p < end ? t.cp.cps[p] : kInvalid; };
  auto cls = [&](size_t p) { return p < end ? t.cls[p] : Cls::none; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cp(pos);
    const Cls k = cls(pos);
    if (c == '\'' && pos + 1 < end) {
      const uint32_t n1 = ascii_lower(cp(pos + 1));
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        ends.push_back(pos += 2);
        continue;
      }
      const uint32_t n2 = ascii_lower(cp(pos + 2));
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
  auto cp = [&](size_t p) { return p < end ? t.cp.cps[p] : kInvalid; };
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

// Splits [begin, end) into runs where match(i) holds and the gaps between them (one regex pass of
// llama.cpp's unicode_regex_split: matches and the text between them both become pieces).
template <typename Match>
void split_runs(size_t begin, size_t end, Match match, std::vector<size_t>& ends) {
  size_t pos = begin;
  while (pos < end) {
    const bool m = match(pos);
    while (pos < end && match(pos) == m) ++pos;
    ends.push_back(pos);
  }
}

std::vector<size_t> split(PreTokenizer kind, const Text& t) {
  const size_t n = t.cls.size();
  std::vector<size_t> ends;
  switch (kind) {
    case PreTokenizer::llama3:
      split_llama3(t, 0, n, 3, ends);
      return ends;
    case PreTokenizer::qwen2:
      split_llama3(t, 0, n, 1, ends);
      return ends;
    case PreTokenizer::gpt2:
      split_gpt2(t, 0, n, ends);
      return ends;
    case PreTokenizer::default_bpe:
      break;
  }
  // llama.cpp's default: [\p{P}\$\+<=>\^~\|]+, then the GPT-2 regex, then \p{N}+, then [0-9][0-9][0-9].
  auto pass = [&](auto&& split_one) {
    std::vector<size_t> out;
    size_t begin = 0;
    for (size_t e : ends) {
      split_one(begin, e, out);
      begin = e;
    }
    ends = std::move(out);
  };
  ends = {n};
  if (n == 0) return {};
  pass([&](size_t b, size_t e, std::vector<size_t>& out) {
    split_runs(b, e, [&](size_t i) {
      const uint32_t c = t.cp.cps[i];
      return t.cls[i] == Cls::punct || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
             c == '~' || c == '|';
    }, out);
  });
  pass([&](size_t b, size_t e, std::vector<size_t>& out) { split_gpt2(t, b, e, out); });
  pass([&](size_t b, size_t e, std::vector<size_t>& out) {
    split_runs(b, e, [&](size_t i) { return t.cls[i] == Cls::number; }, out);
  });
  pass([&](size_t b, size_t e, std::vector<size_t>& out) {
    auto digit = [&](size_t i) { return i < e && t.cp.cps[i] >= '0' && t.cp.cps[i] <= '9'; };
    size_t pos = b, last = b;
    while (pos < e) {
      if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
        if (pos > last) out.push_back(pos);
        out.push_back(last = pos += 3);
      } else {
        ++pos;
      }
    }
    if (last < e) out.push_back(e);
  });
  return ends;
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view pre) {
  if (pre.empty() || pre == "default") return PreTokenizer::default_bpe;
  if (pre == "gpt2" || pre == "mpt" || pre == "olmo" || pre == "jais") return PreTokenizer::gpt2;
  if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3" || pre == "falcon3") return PreTokenizer::llama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizer::qwen2;
  const std::vector<std::string> known = {"default", "gpt2", "mpt", "olmo", "jais", "llama3", "llama-bpe",
                                          "llama-v3", "falcon3", "qwen2", "deepseek-r1-qwen"};
  throw std::invalid_argument("tokenizer: unknown pre-tokenizer '" + std::string(pre) + "'" +
                              suggestion(pre, known));
}

std::vector<std::string> pretokenize(PreTokenizer kind, std::string_view text) {
  const CodePoints cps = decode_utf8(text);
  const Text t(cps);
  std::vector<std::string> words;
  size_t begin = 0;
  for (size_t e : split(kind, t)) {
    if (e > begin) words.emplace_back(text.substr(cps.offsets[begin], cps.offsets[e] - cps.offsets[begin]));
    begin = e;
  }
  return words;
}

std::string gpt2_byte_encode(std::string_view bytes) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += map.encode[uint8_t(c)];
  return out;
}

std::string gpt2_byte_decode(std::string_view text) {
  const ByteMap& map = byte_map();
  const CodePoints cps = decode_utf8(text);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < cps.cps.size(); ++i) {
    const uint32_t cp = cps.cps[i];
    if (cp < map.decode.size() && map.decode[cp] >= 0) {
      out += char(map.decode[cp]);
    } else {
      out.append(text.substr(cps.offsets[i], cps.offsets[i + 1] - cps.offsets[i]));
    }
  }
  return out;
}

void Tokenizer::init_bpe() {
  pre_ = pre_tokenizer_from_name(spec_.pre);
  ignore_merges_ = pre_ == PreTokenizer::llama3;
  merge_ranks_.reserve(spec_.merges.size());
  for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
    const std::string& merge = spec_.merges[rank];
    const size_t space = merge.find(' ', 1);
    auto bad = [&](const std::string& why) {
      throw std::invalid_argument("tokenizer: merge " + std::to_string(rank) + " '" + merge + "' " + why);
    };
    if (space == std::string::npos || space + 1 >= merge.size()) bad("is not two tokens separated by a space");
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    if (find_token(left) < 0) bad("names unknown token '" + left + "'");
    if (find_token(right) < 0) bad("names unknown token '" + right + "'");
    if (find_token(left + right) < 0) bad("makes '" + left + right + "', which is not a token");
    merge_ranks_.emplace(merge, int32_t(rank));  // the first rank of a repeated merge stands
  }
}

// llama.cpp's llm_tokenizer_bpe: pre-tokenize, map each word's bytes to code points, split into one
// symbol per byte, merge the adjacent pair of lowest rank (ties: leftmost) until none is left.
void Tokenizer::encode_bpe(std::string_view fragment, std::vector<int32_t>& out) const {
  const ByteMap& map = byte_map();
  std::vector<MergeSymbol> symbols;  // offsets and lengths in the mapped word
  std::string key;
  for (const std::string& word : pretokenize(pre_, fragment)) {
    const std::string mapped = gpt2_byte_encode(word);
    if (ignore_merges_) {
      const int32_t id = find_token(mapped);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    symbols.clear();
    for (size_t i = 0, offset = 0; i < word.size(); ++i) {
      const size_t length = map.encode[uint8_t(word[i])].size();
      symbols.push_back({int(i) - 1, i + 1 == word.size() ? -1 : int(i) + 1, offset, length});
      offset += length;
    }
    // A lower merge rank merges first.
    merge_symbols(symbols, [&](int left, int right) -> std::optional<int64_t> {
      const MergeSymbol& l = symbols[size_t(left)];
      const MergeSymbol& r = symbols[size_t(right)];
      key.assign(mapped, l.offset, l.length);
      key += ' ';
      key.append(mapped, r.offset, r.length);
      auto it = merge_ranks_.find(key);
      if (it == merge_ranks_.end()) return std::nullopt;
      return -int64_t(it->second);
    });
    for (int i = 0; i != -1 && !symbols.empty(); i = symbols[size_t(i)].next) {
      const MergeSymbol& s = symbols[size_t(i)];
      const int32_t id = find_token(std::string_view(mapped).substr(s.offset, s.length));
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Only a byte whose mapped character is missing from the vocabulary gets here (merge results
      // are checked to be tokens); llama.cpp drops it, unk keeps a trace of it.
      if (spec_.unk >= 0) out.push_back(spec_.unk);
    }
  }
}

}  // namespace tokenhost
