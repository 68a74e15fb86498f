// The Tokenizer: validation, special-token matching, decoding, and the SentencePiece ("llama") encoder.
// The byte-level BPE ("gpt2") encoder and pre-tokenizers are in tokenizer_bpe.cpp.
#include "model/tokenizer.hpp"

#include "model/symbol_merge.hpp"

#include <algorithm>
#include <stdexcept>

#include "util/text.hpp"

namespace tokenhost {

namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("tokenizer: " + what); }

// The length of the UTF-8 sequence a lead byte starts (llama.cpp's unicode_len_utf8: a stray
// continuation byte counts as one).
size_t utf8_len(char c) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[uint8_t(c) >> 4];
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte a "<0xAB>" token stands for, or -1 when text is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t last = 0;
  for (size_t pos; (pos = s.find(from, last)) != std::string::npos; last = pos + from.size()) {
    out.append(s, last, pos - last);
    out.append(to);
  }
  out.append(s, last, std::string::npos);
  s = std::move(out);
}

struct Fragment {
  int32_t token;  // -1 for raw text
  size_t offset, length;
};

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {
  std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
  if (spec_.model == "llama") {
    kind_ = Kind::spm;
  } else if (spec_.model == "gpt2") {
    kind_ = Kind::bpe;
  } else if (spec_.model == "bert") {
    kind_ = Kind::wpm;
  } else {
    fail("unknown tokenizer model '" + spec_.model + "'" + suggestion(spec_.model, {"llama", "gpt2", "bert"}));
  }
  const bool spm = kind_ == Kind::spm;
  const size_t n = spec_.tokens.size();
  if (n == 0) fail("the vocabulary has no tokens");
  if (n > size_t(INT32_MAX)) fail("the vocabulary has too many tokens");
  if (!spec_.scores.empty() && spec_.scores.size() != n)
    fail(std::to_string(spec_.scores.size()) + " scores for " + std::to_string(n) + " tokens");
  if (!spec_.token_types.empty() && spec_.token_types.size() != n)
    fail(std::to_string(spec_.token_types.size()) + " token types for " + std::to_string(n) + " tokens");
  if (spec_.scores.empty()) spec_.scores.assign(n, 0.0f);
  if (spec_.token_types.empty()) spec_.token_types.assign(n, int32_t(TokenType::normal));
  for (auto [name, id] : {std::pair<const char*, int32_t>{"bos", spec_.bos}, {"eos", spec_.eos},
                          {"unk", spec_.unk}, {"pad", spec_.pad}}) {
    if (id < -1 || id >= int64_t(n))
      fail(std::string(name) + " token id " + std::to_string(id) + " out of range (vocabulary of " +
           std::to_string(n) + " tokens)");
  }

  token_ids_.reserve(n);
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = spec_.tokens[i];
    const int32_t type = spec_.token_types[i];
    if (type < 0 || type > int32_t(TokenType::byte))
      fail("token " + std::to_string(i) + " '" + text + "' has unknown type " + std::to_string(type));
    token_ids_[text] = int32_t(i);
    switch (TokenType(type)) {
      case TokenType::normal:
        if (kind_ != Kind::bpe) {  // SentencePiece and WordPiece both escape a word's leading space as ▁
          pieces_[i] = text;
          replace_all(pieces_[i], kSpace, " ");
        } else {
          pieces_[i] = gpt2_byte_decode(text);
        }
        break;
      case TokenType::byte:
        if (spm) {
          int b = parse_byte_token(text);
          if (b < 0) fail("byte token " + std::to_string(i) + " '" + text + "' is not of the form <0xXX>");
          pieces_[i] = std::string(1, char(b));
        } else if (kind_ == Kind::bpe) {
          pieces_[i] = gpt2_byte_decode(text);
        } else {
          pieces_[i] = text;
        }
        break;
      case TokenType::user_defined:
        pieces_[i] = text;
        break;
      default:  // control, unknown, unused, undefined: nothing
        break;
    }
    const TokenType t = TokenType(type);
    if ((t == TokenType::control || t == TokenType::unknown || t == TokenType::user_defined) && !text.empty())
      specials_.push_back(int32_t(i));
  }
  std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
    return spec_.tokens[size_t(a)].size() > spec_.tokens[size_t(b)].size();
  });

  if (spm) {
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
      int32_t id = find_token(name);
      if (id < 0) id = find_token(std::string(1, char(b)));  // llama.cpp's fallback: the byte itself
      byte_tokens_[b] = id;
    }
  } else if (kind_ == Kind::bpe) {
    init_bpe();
  } else {
    for (const std::string& text : spec_.tokens) max_token_bytes_ = std::max(max_token_bytes_, text.size());
  }
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && size_t(id) < spec_.tokens.size() && spec_.token_types[size_t(id)] == int32_t(TokenType::control);
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || size_t(id) >= spec_.tokens.size())
    throw std::out_of_range("tokenizer: token id " + std::to_string(id) + " out of range");
  return TokenType(spec_.token_types[size_t(id)]);
}

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = token_ids_.find(text);
  return it == token_ids_.end() ? -1 : it->second;
}

std::string Tokenizer::token_text(int32_t id) const {
  if (id < 0 || size_t(id) >= pieces_.size())
    throw std::out_of_range("tokenizer: token id " + std::to_string(id) + " out of range (vocabulary of " +
                            std::to_string(pieces_.size()) + " tokens)");
  return pieces_[size_t(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  // The one leading space an encoder added: SentencePiece's prefix, WordPiece's first word's ▁.
  bool strip_space = (kind_ == Kind::spm && spec_.add_space_prefix) || kind_ == Kind::wpm;
  for (int32_t id : ids) {
    std::string piece = token_text(id);
    if (piece.empty()) continue;
    if (strip_space && piece.front() == ' ') {
      out.append(piece, 1, std::string::npos);
    } else {
      out += piece;
    }
    strip_space = false;
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  return encode(text, add_bos, parse_special);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special_tokens) const {
  // Split the text around special tokens, longest first (llama.cpp's tokenizer_st_partition).
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  for (int32_t id : specials_) {
    const TokenType type = TokenType(spec_.token_types[size_t(id)]);
    if (!parse_special_tokens && type != TokenType::user_defined) continue;
    const std::string& special = spec_.tokens[size_t(id)];
    if (text.find(special) == std::string_view::npos) continue;
    std::vector<Fragment> next;
    next.reserve(fragments.size() + 2);
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view raw = text.substr(f.offset, f.length);
      size_t start = 0;
      for (size_t pos; (pos = raw.find(special, start)) != std::string_view::npos; start = pos + special.size()) {
        if (pos > start) next.push_back({-1, f.offset + start, pos - start});
        next.push_back({id, 0, 0});
      }
      if (start < raw.size()) next.push_back({-1, f.offset + start, raw.size() - start});
    }
    fragments = std::move(next);
  }

  std::vector<int32_t> out;
  if (add_bos && spec_.add_bos && spec_.bos >= 0) out.push_back(spec_.bos);
  bool prev_special = true;  // the text start counts as one: llama adds its space prefix there
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
    } else if (kind_ == Kind::spm) {
      encode_spm(text.substr(f.offset, f.length), spec_.add_space_prefix && prev_special, out);
      prev_special = false;
    } else if (kind_ == Kind::bpe) {
      encode_bpe(text.substr(f.offset, f.length), out);
      prev_special = false;
    } else {
      encode_wpm(text.substr(f.offset, f.length), out);
      prev_special = false;
    }
  }
  return out;
}

// SentencePiece (llama.cpp's llm_tokenizer_spm): escape spaces, split into UTF-8 characters, then
// repeatedly merge the adjacent pair whose concatenation is a token with the highest score (ties: the
// leftmost pair). Pieces that are not tokens fall back to byte tokens, or to unk.
void Tokenizer::encode_spm(std::string_view fragment, bool space_prefix, std::vector<int32_t>& out) const {
  std::string text = space_prefix ? kSpace : std::string();
  text.reserve(text.size() + fragment.size());
  for (char c : fragment) {
    if (c == ' ') {
      text += kSpace;
    } else {
      text += c;
    }
  }
  if (text.empty()) return;

  std::vector<MergeSymbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = std::min(utf8_len(text[offset]), text.size() - offset);
    const int index = int(symbols.size());
    symbols.push_back({index - 1, offset + length == text.size() ? -1 : index + 1, offset, length});
    offset += length;
  }
  merge_symbols(symbols, [&](int left, int right) -> std::optional<float> {
    const size_t length = symbols[size_t(left)].length + symbols[size_t(right)].length;
    const int32_t id = find_token(std::string_view(text).substr(symbols[size_t(left)].offset, length));
    if (id < 0) return std::nullopt;
    return spec_.scores[size_t(id)];
  });

  for (int i = 0; i != -1; i = symbols[size_t(i)].next) {
    const MergeSymbol& s = symbols[size_t(i)];
    std::string_view piece = std::string_view(text).substr(s.offset, s.length);
    const int32_t id = find_token(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    const bool all_bytes =
        std::all_of(piece.begin(), piece.end(), [&](char c) { return byte_tokens_[uint8_t(c)] >= 0; });
    if (all_bytes) {
      for (char c : piece) out.push_back(byte_tokens_[uint8_t(c)]);
    } else if (spec_.unk >= 0) {
      out.push_back(spec_.unk);
    }
  }
}

}  // namespace tokenhost
