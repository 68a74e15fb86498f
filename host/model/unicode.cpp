#include "model/unicode.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <stdexcept>

namespace tokenhost::unicode {

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

CodePoints decode_utf8(std::string_view s) {
  CodePoints r;
  r.cps.reserve(s.size());
  r.offsets.reserve(s.size() + 1);
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

namespace {

bool is_whitespace(uint32_t cp) {
  return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

Cls classify_ascii(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return Cls::letter;
  if (cp >= '0' && cp <= '9') return Cls::number;
  if (is_whitespace(cp)) return Cls::space;
  if (cp < 0x20 || cp == 0x7F) return Cls::control;
  switch (cp) {
    case '$': case '+': case '<': case '=': case '>': case '^': case '`': case '|': case '~':
      return Cls::symbol;
    default:
      return Cls::punct;
  }
}

}  // namespace

Cls classify(uint32_t cp) {
  if (cp < 0x80) return classify_ascii(cp);
  if (cp == kInvalid) return Cls::symbol;
  if (is_whitespace(cp)) return Cls::space;
  switch (u_charType(UChar32(cp))) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return Cls::letter;
    case U_DECIMAL_DIGIT_NUMBER: case U_LETTER_NUMBER: case U_OTHER_NUMBER:
      return Cls::number;
    case U_NON_SPACING_MARK: case U_ENCLOSING_MARK: case U_COMBINING_SPACING_MARK:
      return Cls::mark;
    case U_CONNECTOR_PUNCTUATION: case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION: case U_FINAL_PUNCTUATION: case U_OTHER_PUNCTUATION:
      return Cls::punct;
    case U_MATH_SYMBOL: case U_CURRENCY_SYMBOL: case U_MODIFIER_SYMBOL: case U_OTHER_SYMBOL:
      return Cls::symbol;
    default:  // controls, format characters, surrogates, private use, unassigned
      return Cls::control;
  }
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  if (cp > 0x10FFFF) return cp;
  return uint32_t(u_tolower(UChar32(cp)));
}

uint32_t nfd_first(uint32_t cp) {
  if (cp < 0xC0 || cp > 0x10FFFF) return cp;  // nothing below U+00C0 decomposes
  static const icu::Normalizer2* nfd = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status) || !n) throw std::runtime_error(std::string("unicode: ICU's NFD data: ") + u_errorName(status));
    return n;
  }();
  icu::UnicodeString decomposition;
  if (!nfd->getDecomposition(UChar32(cp), decomposition) || decomposition.isEmpty()) return cp;
  return uint32_t(decomposition.char32At(0));
}

}  // namespace tokenhost::unicode
