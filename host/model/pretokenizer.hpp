// How a byte-level BPE vocabulary splits text into the words its merges stay within: llama.cpp's
// pre-tokenizer regexes (llama-vocab.cpp), each written by hand as a pass over code points classified
// by model/unicode.hpp. A pre-tokenizer is a list of passes; every pass splits each piece the previous
// ones made into its matches and the text between them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tokenhost {

enum class PreTokenizer {
  default_bpe,     // "default" or "": [\p{P}\$\+<=>\^~\|]+, then gpt2, then \p{N}+, then [0-9][0-9][0-9]
  gpt2,            // "gpt2", "gpt-2", "mpt", "olmo", "jais", ...:
                   //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  llama3,          // "llama3", "llama-bpe", "llama-v3", "falcon3": case-insensitive contractions,
                   //   \p{N}{1,3}, [^\r\n\p{L}\p{N}]?\p{L}+, ...
  qwen2,           // "qwen2", "deepseek-r1-qwen": as llama3 but single digits
  falcon,          // "falcon": [\p{P}\$\+<=>\^~\|`]+, then gpt2, then [0-9][0-9][0-9]
  starcoder,       // "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b":
                   //   \p{N} (each digit alone), then gpt2
  deepseek_llm,    // "deepseek-llm": [\r\n], \s?[Latin, Greek, Cyrillic, ... letters]+, \s?[ASCII and
                   //   full-width punctuation]+, \s+$, [CJK, Hangul and the scripts between]+, \p{N}+
  deepseek_coder,  // "deepseek-coder": [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK ...]+, \p{N}
};

// The pre-tokenizer a tokenizer.ggml.pre name selects; throws std::invalid_argument for a name it does
// not know, naming the nearest it does.
PreTokenizer pre_tokenizer_from_name(std::string_view pre);

// Splits text (bytes, UTF-8 expected; an invalid byte is kept as a one-byte unit classed as a symbol)
// into the words BPE merges within. The words concatenate back to text.
std::vector<std::string> pretokenize(PreTokenizer kind, std::string_view text);

}  // namespace tokenhost
