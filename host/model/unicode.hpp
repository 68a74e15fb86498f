// Code points for the tokenizers: UTF-8 decoding that keeps every byte, and what llama.cpp's
// tokenizers ask of each code point (its Unicode general category, taken from ICU; whitespace as
// llama.cpp's set; simple lower case; the first code point of its canonical decomposition).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokenhost::unicode {

// A byte that does not start a valid UTF-8 sequence decodes to this (one byte, kept as it is).
constexpr uint32_t kInvalid = 0xFFFFFFFF;

struct CodePoints {
  std::vector<uint32_t> cps;
  std::vector<size_t> offsets;  // byte offset of each code point, plus the text's size
};

// Decodes text; an invalid or truncated sequence yields kInvalid for its first byte and decoding goes
// on at the next byte, so the offsets cover every byte.
CodePoints decode_utf8(std::string_view text);
void append_utf8(std::string& out, uint32_t cp);

// A code point's class, as the pre-tokenizers' \p{L}, \p{N}, \s, \p{P}, \p{S}, \p{M}, \p{C} see it.
// Whitespace is llama.cpp's set (\t..\r, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000), which holds every separator (Z*); the rest follows the general category.
// kInvalid is a symbol (as U+FFFD, which llama.cpp puts in its place).
enum class Cls : uint8_t { none, letter, number, space, punct, symbol, mark, control };

Cls classify(uint32_t cp);
uint32_t to_lower(uint32_t cp);  // the simple lower-case mapping; cp itself when it has none
uint32_t nfd_first(uint32_t cp);  // the first code point of cp's NFD; cp itself when it does not decompose

}  // namespace tokenhost::unicode
