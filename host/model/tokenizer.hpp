// The tokenizers that GGUF models carry, built from the tokenizer.ggml.* metadata (filled in elsewhere;
// this file reads no model files): SentencePiece ("llama": merge adjacent pieces by score, byte
// fallback to "<0xXX>" tokens, spaces escaped as U+2581), byte-level BPE ("gpt2": GPT-2's byte to
// code point mapping, merge ranks, the pre-tokenizers of pretokenizer.hpp) and WordPiece ("bert":
// lower case, accents stripped, split at whitespace, punctuation and CJK characters, each word matched
// longest piece first). Behaviour follows llama.cpp's llama-vocab.cpp and unicode.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/pretokenizer.hpp"

namespace tokenhost {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct TokenizerSpec {
  std::string model;                 // tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (byte-level BPE)
                                     // or "bert" (WordPiece)
  std::string pre;                   // tokenizer.ggml.pre: "default", "llama3" ("llama-bpe"), "qwen2", "gpt2", ...
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores (empty: all 0)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (TokenType values; empty: all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("a b" per entry, rank = index), gpt2 only
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = true;           // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix (llama only)
  bool lowercase = true;         // tokenizer.ggml.normalizer.lowercase (bert only)
  bool strip_accents = true;     // tokenizer.ggml.normalizer.strip_accents (bert only; default: lowercase)
};

// GPT-2's byte-level mapping: every byte becomes one printable code point (UTF-8), e.g. ' ' -> "Ġ".
std::string gpt2_byte_encode(std::string_view bytes);
// Its inverse; code points outside the mapping pass through as their UTF-8.
std::string gpt2_byte_decode(std::string_view text);

class Tokenizer {
 public:
  // Validates spec; throws std::invalid_argument naming what is wrong (an unknown model or pre-tokenizer
  // by name, scores/token_types sizes that do not match the tokens, a special id out of range, a token
  // type out of range, a byte token not of the form <0xXX>, a malformed merge or one naming a token
  // the vocabulary lacks).
  explicit Tokenizer(TokenizerSpec spec);

  // When true, text matching a control or unknown token (e.g. "<|eot_id|>", "<s>") is encoded as that
  // token. User-defined tokens are always matched, as in llama.cpp. Longer special tokens win.
  bool parse_special = false;

  // BOS first when add_bos && spec.add_bos (and the spec has a bos). llama: a space prefix ("▁") goes
  // before the text and after every special token matched within it (when spec.add_space_prefix).
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // The bytes ids stand for: token_text of each, with (llama with add_space_prefix, bert) the one leading space
  // the encoder added removed from the first token that yields text. Throws std::out_of_range for an
  // id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  // The bytes one token stands for, for streaming: control, unknown, unused and undefined tokens are "";
  // user-defined tokens their text; llama and bert: "▁" -> ' '; llama: "<0xAB>" byte tokens -> that byte; gpt2: the
  // byte-level mapping undone. Throws std::out_of_range for an id outside the vocabulary.
  std::string token_text(int32_t id) const;

  int32_t bos() const { return spec_.bos; }
  int32_t eos() const { return spec_.eos; }
  int32_t unk() const { return spec_.unk; }
  int32_t pad() const { return spec_.pad; }
  size_t vocab_size() const { return spec_.tokens.size(); }
  bool is_control(int32_t id) const;  // false for ids outside the vocabulary
  TokenType token_type(int32_t id) const;  // throws std::out_of_range
  int32_t find_token(std::string_view text) const;  // the id whose vocabulary text is text, or -1
  const TokenizerSpec& spec() const { return spec_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using TextMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  void encode_spm(std::string_view fragment, bool space_prefix, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view fragment, std::vector<int32_t>& out) const;
  void init_bpe();  // merge ranks and byte tokens (tokenizer_bpe.cpp)
  void encode_wpm(std::string_view fragment, std::vector<int32_t>& out) const;  // tokenizer_wpm.cpp

  TokenizerSpec spec_;
  enum class Kind { spm, bpe, wpm } kind_ = Kind::spm;
  size_t max_token_bytes_ = 0;               // wpm: the longest token's text
  PreTokenizer pre_ = PreTokenizer::default_bpe;
  bool ignore_merges_ = false;               // llama3: a word that is a token is taken whole
  TextMap token_ids_;                        // text -> id (the last id when texts repeat, as llama.cpp)
  TextMap merge_ranks_;                      // "a b" -> rank (gpt2)
  std::vector<std::string> pieces_;          // token_text of each id
  std::vector<int32_t> specials_;            // control/unknown/user-defined ids, longest text first
  int32_t byte_tokens_[256];                 // llama: the token each byte falls back to, or -1
};

}  // namespace tokenhost
