// tokenhost plugin SDK: GBNF grammars (C++17, header-only), the grammar format of structured output
// (th_constraint.h): the host checks a request's grammar with it and hands every constraint engine the
// GBNF of what a request asks (th_constraint_source.gbnf); constraint.gbnf, and any vendor's engine that
// wants it, compiles and follows grammars with it. Adds no ABI.
//
// llama.cpp's GBNF (the format llama-server's `grammar` takes), compiled to flat rules, and a matcher
// that follows text through it a byte at a time.
//
// Accepted syntax: `name ::= alternatives` rules (names of letters, digits and '-'), alternatives
// separated by '|', sequences of "literal" strings (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH),
// [character classes] (ranges a-z, negation [^...], the same escapes), rule names, ( groups ), and the
// postfix operators * + ? {m} {m,} {m,n}; '#' starts a comment to the end of the line. The start rule
// is `root`. Characters are Unicode code points; the matcher reads UTF-8 bytes, holding a partial
// character between bytes.
#ifndef TOKENHOST_GBNF_HPP
#define TOKENHOST_GBNF_HPP

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokenhost::sdk {

// One element of a rule's alternative, flattened: a character set, a reference to another rule, or the
// end of an alternative / of a rule's alternatives.
struct GrammarElement {
  enum class Kind : uint8_t { end_alternative, end_rule, chars, rule_ref };
  GrammarElement(Kind k = Kind::end_rule) : kind(k) {}  // NOLINT: implicit, {Kind::end_rule} reads as the element
  Kind kind;
  bool negated = false;                            // chars: any code point outside the ranges
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // chars: inclusive code point ranges
  uint32_t rule = 0;                               // rule_ref: the rule's index
};

struct Grammar {
  // Each rule: its alternatives one after the other, each closed by end_alternative, the last by end_rule.
  std::vector<std::vector<GrammarElement>> rules;
  std::vector<std::string> names;  // per rule (generated rules: the rule they come from and a suffix)
  uint32_t root = 0;
};

// Parses and compiles text. Throws std::invalid_argument naming the line and column of what is wrong
// (a syntax error, an undefined rule, no root, left recursion, which the matcher cannot follow).
Grammar parse_gbnf(std::string_view text);

// Where a text can be in the grammar: the set of parse stacks (each the elements still to match, the
// next on top). Copyable: a draft row's state is a copy, dropped when the draft is.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  // Consumes one byte of UTF-8 text; false (the state unchanged) when no parse continues with it.
  bool accept_byte(uint8_t byte);
  // Consumes bytes; false (the state unchanged) when any of them is refused.
  bool accept(std::string_view bytes);
  // Whether the text so far is a whole sentence of the grammar (it may also continue).
  bool complete() const;
  // Whether bytes could follow the text so far (without consuming them).
  bool allows(std::string_view bytes) const;
  // Where the matcher is, as bytes: two matchers of one grammar with equal keys take exactly the same
  // texts from here on (what a cache of masks is keyed by). Stacks are kept sorted, so the key does not
  // depend on how the text got here.
  std::string state_key() const {
    std::string key;
    auto put = [&](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
    put(&partial_, sizeof partial_);
    put(&pending_, sizeof pending_);
    put(&partial_length_, sizeof partial_length_);
    for (const Stack& s : stacks_) {
      const size_t n = s.size();
      put(&n, sizeof n);
      put(s.data(), n * sizeof(s[0]));
    }
    return key;
  }

 private:
  using Stack = std::vector<const GrammarElement*>;
  void advance_code_point(uint32_t cp, std::vector<Stack>& out) const;
  bool partial_possible(const std::vector<Stack>& stacks) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  // A character begun but not finished: its bits so far and the bytes it still needs.
  uint32_t partial_ = 0;
  int pending_ = 0;
  int partial_length_ = 0;
};


namespace gbnf_detail {

using Kind = GrammarElement::Kind;

inline bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Grammar parse() {
    skip_space(true);
    while (pos_ < text_.size()) {
      const size_t at = pos_;
      const std::string name = parse_name();
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      const uint32_t id = rule_id(name, at);
      if (defined_[id]) fail(at, "rule '" + name + "' is defined twice");
      defined_[id] = true;
      g_.rules[id] = parse_alternatives(false, name);
      if (pos_ < text_.size() && text_[pos_] != '\n' && text_[pos_] != '\r') fail(pos_, "expected the end of the line after rule '" + name + "'");
      skip_space(true);
    }
    for (const auto& [name, id] : ids_)
      if (!defined_[id]) fail(first_use_[id], "rule '" + name + "' is used but never defined");
    auto root = ids_.find("root");
    if (root == ids_.end()) throw std::invalid_argument("grammar: no rule 'root' (the start rule)");
    g_.root = root->second;
    check_left_recursion();
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line, column = 1;
      else ++column;
    }
    throw std::invalid_argument("grammar:" + std::to_string(line) + ":" + std::to_string(column) + ": " + what);
  }

  // Spaces, tabs, comments; newlines too when newline_ok.
  void skip_space(bool newline_ok) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail(pos_, "expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto [it, fresh] = ids_.emplace(name, uint32_t(g_.rules.size()));
    if (fresh) {
      g_.rules.emplace_back();
      g_.names.push_back(name);
      defined_.push_back(false);
      first_use_.push_back(at);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base, std::vector<GrammarElement> elements) {
    const uint32_t id = uint32_t(g_.rules.size());
    g_.rules.push_back(std::move(elements));
    g_.names.push_back(base + "_" + std::to_string(id));
    defined_.push_back(true);
    first_use_.push_back(pos_);
    return id;
  }

  static GrammarElement ref(uint32_t rule) {
    GrammarElement e{Kind::rule_ref};
    e.rule = rule;
    return e;
  }

  // One code point of a literal or class: UTF-8 as written, or an escape.
  uint32_t parse_char() {
    if (pos_ >= text_.size()) fail(pos_, "unexpected end of the grammar");
    const uint8_t c = uint8_t(text_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= text_.size()) fail(pos_, "a '\\' at the end of the grammar");
      const char e = text_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return uint32_t(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: fail(pos_ - 2, std::string("unknown escape '\\") + e + "'");
      }
    }
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || pos_ + size_t(n) > text_.size()) fail(pos_, "text that is not UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) {
      const uint8_t cc = uint8_t(text_[pos_ + size_t(k)]);
      if ((cc & 0xC0) != 0x80) fail(pos_, "text that is not UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    pos_ += size_t(n);
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) fail(pos_, "expected a hex digit");
      const char c = text_[pos_];
      v = v * 16 + uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    if (v > 0x10FFFF) fail(pos_, "a code point past U+10FFFF");
    return v;
  }

  uint32_t parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) && v < 100000) v = v * 10 + uint64_t(text_[pos_++] - '0');
    if (pos_ == start) fail(pos_, "expected a count");
    if (v > 1000) fail(start, "a repetition count above 1000");
    return uint32_t(v);
  }

  std::vector<GrammarElement> parse_alternatives(bool nested, const std::string& rule) {
    std::vector<GrammarElement> out;
    parse_sequence(out, nested, rule);
    while (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      out.push_back({Kind::end_alternative});
      parse_sequence(out, nested, rule);
    }
    out.push_back({Kind::end_rule});
    return out;
  }

  void parse_sequence(std::vector<GrammarElement>& out, bool nested, const std::string& rule) {
    size_t last = out.size();  // where the last item (what a postfix operator repeats) starts
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        last = out.size();
        while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\n') {
          GrammarElement e{Kind::chars};
          const uint32_t cp = parse_char();
          e.ranges.push_back({cp, cp});
          out.push_back(std::move(e));
        }
        if (pos_ >= text_.size() || text_[pos_] == '\n') fail(pos_, "a string literal without its closing '\"'");
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        last = out.size();
        GrammarElement e{Kind::chars};
        if (pos_ < text_.size() && text_[pos_] == '^') e.negated = true, ++pos_;
        while (pos_ < text_.size() && text_[pos_] != ']' && text_[pos_] != '\n') {
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']' && text_[pos_ + 1] != '\n') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail(pos_, "a character range that runs backwards");
          }
          e.ranges.push_back({lo, hi});
        }
        if (pos_ >= text_.size() || text_[pos_] == '\n') fail(pos_, "a character class without its closing ']'");
        ++pos_;
        out.push_back(std::move(e));
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        last = out.size();
        out.push_back(ref(rule_id(parse_name(), at)));
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        last = out.size();
        std::vector<GrammarElement> group = parse_alternatives(true, rule);
        if (pos_ >= text_.size() || text_[pos_] != ')') fail(pos_, "a '(' without its ')'");
        ++pos_;
        out.push_back(ref(new_rule(rule, std::move(group))));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == out.size()) fail(pos_, std::string("'") + c + "' repeats nothing");
        uint32_t min = 0, max = 0;
        bool unbounded = false;
        if (c == '*') unbounded = true;
        if (c == '+') min = 1, unbounded = true;
        if (c == '?') max = 1;
        ++pos_;
        if (c == '{') {
          skip_space(false);
          min = parse_count();
          skip_space(false);
          max = min;
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            if (pos_ < text_.size() && text_[pos_] == '}') unbounded = true;
            else max = parse_count();
            skip_space(false);
          }
          if (pos_ >= text_.size() || text_[pos_] != '}') fail(pos_, "expected '}'");
          ++pos_;
          if (!unbounded && max < min) fail(pos_, "a repetition whose maximum is under its minimum");
        }
        const std::vector<GrammarElement> item(out.begin() + long(last), out.end());
        out.resize(last);
        for (uint32_t i = 0; i < min; ++i) out.insert(out.end(), item.begin(), item.end());
        if (unbounded) {
          // R ::= item R | (nothing)
          const uint32_t r = new_rule(rule, {});
          std::vector<GrammarElement> body = item;
          body.push_back(ref(r));
          body.push_back({Kind::end_alternative});
          body.push_back({Kind::end_rule});
          g_.rules[r] = std::move(body);
          out.push_back(ref(r));
        } else if (max > min) {
          // O_1 ::= item O_2 | (nothing), ..., O_k ::= item | (nothing): at most max - min more.
          uint32_t next = UINT32_MAX;
          for (uint32_t k = max - min; k > 0; --k) {
            std::vector<GrammarElement> body = item;
            if (next != UINT32_MAX) body.push_back(ref(next));
            body.push_back({Kind::end_alternative});
            body.push_back({Kind::end_rule});
            next = new_rule(rule, std::move(body));
          }
          out.push_back(ref(next));
        }
        last = out.size();  // a repetition is not repeated again without parentheses
      } else {
        break;
      }
      skip_space(nested);
    }
  }

  // Rules that can match nothing, then a rule that reaches itself before matching a character.
  void check_left_recursion() const {
    const size_t n = g_.rules.size();
    std::vector<bool> nullable(n, false);
    auto alt_nullable = [&](const std::vector<GrammarElement>& rule, size_t i) {
      for (; rule[i].kind != Kind::end_alternative && rule[i].kind != Kind::end_rule; ++i)
        if (rule[i].kind == Kind::chars || !nullable[rule[i].rule]) return false;
      return true;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        const auto& rule = g_.rules[r];
        for (size_t i = 0; i < rule.size();) {
          if (alt_nullable(rule, i)) {
            nullable[r] = changed = true;
            break;
          }
          while (rule[i].kind != Kind::end_alternative && rule[i].kind != Kind::end_rule) ++i;
          if (rule[i].kind == Kind::end_rule) break;
          ++i;
        }
      }
    }
    std::vector<int> state(n, 0);  // 0 unseen, 1 on the path, 2 done
    std::function<void(size_t)> visit = [&](size_t r) {
      state[r] = 1;
      const auto& rule = g_.rules[r];
      bool at_start = true;
      for (const auto& e : rule) {
        if (e.kind == Kind::end_alternative || e.kind == Kind::end_rule) {
          at_start = true;
          continue;
        }
        if (!at_start) continue;
        if (e.kind == Kind::chars) {
          at_start = false;
          continue;
        }
        if (state[e.rule] == 1)
          throw std::invalid_argument("grammar: rule '" + g_.names[e.rule] + "' is left-recursive (it reaches itself before any character)");
        if (state[e.rule] == 0) visit(e.rule);
        at_start = nullable[e.rule];
      }
      state[r] = 2;
    };
    for (size_t r = 0; r < n; ++r)
      if (state[r] == 0) visit(r);
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
};

inline bool is_end(const GrammarElement* e) { return e->kind == Kind::end_alternative || e->kind == Kind::end_rule; }

inline bool matches(const GrammarElement& e, uint32_t cp) {
  bool in = false;
  for (const auto& [lo, hi] : e.ranges) in = in || (cp >= lo && cp <= hi);
  return in != e.negated;
}

// Every stack reachable from `stack` whose top is a character set (or that is empty: the sentence is
// complete), into out.
inline void expand(const Grammar& g, std::vector<const GrammarElement*> stack, std::set<std::vector<const GrammarElement*>>& out) {
  if (stack.empty() || stack.back()->kind == Kind::chars) {
    out.insert(std::move(stack));
    return;
  }
  const GrammarElement* top = stack.back();  // a rule reference
  stack.pop_back();
  if (!is_end(top + 1)) stack.push_back(top + 1);
  const auto& rule = g.rules[top->rule];
  for (size_t i = 0; i < rule.size();) {
    std::vector<const GrammarElement*> next = stack;
    if (!is_end(&rule[i])) next.push_back(&rule[i]);
    expand(g, std::move(next), out);
    while (!is_end(&rule[i])) ++i;
    if (rule[i].kind == Kind::end_rule) break;
    ++i;
  }
}

// The code points a UTF-8 sequence of `length` bytes encodes.
inline uint32_t utf8_min(int length) { return length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000; }
inline uint32_t utf8_max(int length) { return length == 2 ? 0x7FF : length == 3 ? 0xFFFF : 0x10FFFF; }

}  // namespace gbnf_detail

inline Grammar parse_gbnf(std::string_view text) { return gbnf_detail::Parser(text).parse(); }

inline GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  // A stack starts at the root rule's alternatives.
  std::set<Stack> out;
  const auto& rule = grammar_->rules[grammar_->root];
  for (size_t i = 0; i < rule.size();) {
    Stack s;
    if (!gbnf_detail::is_end(&rule[i])) s.push_back(&rule[i]);
    gbnf_detail::expand(*grammar_, std::move(s), out);
    while (!gbnf_detail::is_end(&rule[i])) ++i;
    if (rule[i].kind == GrammarElement::Kind::end_rule) break;
    ++i;
  }
  stacks_.assign(out.begin(), out.end());
}

inline void GrammarMatcher::advance_code_point(uint32_t cp, std::vector<Stack>& next) const {
  std::set<Stack> out;
  for (const Stack& s : stacks_) {
    if (s.empty() || !gbnf_detail::matches(*s.back(), cp)) continue;
    Stack n(s.begin(), s.end() - 1);
    if (!gbnf_detail::is_end(s.back() + 1)) n.push_back(s.back() + 1);
    gbnf_detail::expand(*grammar_, std::move(n), out);
  }
  next.assign(out.begin(), out.end());
}

inline bool GrammarMatcher::partial_possible(const std::vector<Stack>& stacks) const {
  // The code points the bytes so far may still become, within what a sequence of its length may
  // encode (no overlong form: 0xF0 0x80 0x81 0xBB is not '{').
  uint32_t lo = partial_ << (6 * pending_), hi = lo | ((1u << (6 * pending_)) - 1);
  lo = std::max(lo, gbnf_detail::utf8_min(partial_length_));
  hi = std::min(hi, gbnf_detail::utf8_max(partial_length_));
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return false;  // nothing, or surrogates only
  for (const Stack& s : stacks) {
    if (s.empty()) continue;
    const GrammarElement& e = *s.back();
    if (e.negated) return true;
    for (const auto& [a, b] : e.ranges)
      if (a <= hi && b >= lo) return true;
  }
  return false;
}

inline bool GrammarMatcher::accept_byte(uint8_t byte) {
  if (pending_ > 0) {
    if ((byte & 0xC0) != 0x80) return false;
    const uint32_t partial = (partial_ << 6) | (byte & 0x3F);
    if (pending_ > 1) {
      const uint32_t saved = partial_;
      partial_ = partial;
      --pending_;
      if (!partial_possible(stacks_)) {
        partial_ = saved;
        ++pending_;
        return false;
      }
      return true;
    }
    if (partial < gbnf_detail::utf8_min(partial_length_) || partial > gbnf_detail::utf8_max(partial_length_) ||
        (partial >= 0xD800 && partial <= 0xDFFF))
      return false;  // overlong, past U+10FFFF, or a surrogate
    std::vector<Stack> next;
    advance_code_point(partial, next);
    if (next.empty()) return false;
    stacks_ = std::move(next);
    pending_ = 0;
    partial_ = 0;
    return true;
  }
  if (byte < 0x80) {
    std::vector<Stack> next;
    advance_code_point(byte, next);
    if (next.empty()) return false;
    stacks_ = std::move(next);
    return true;
  }
  const int more = (byte >> 5) == 0x6 ? 1 : (byte >> 4) == 0xE ? 2 : (byte >> 3) == 0x1E ? 3 : 0;
  if (more == 0) return false;  // a continuation byte or 0xF8.. where a character starts
  partial_ = more == 1 ? (byte & 0x1F) : more == 2 ? (byte & 0x0F) : (byte & 0x07);
  pending_ = more;
  partial_length_ = more + 1;
  if (!partial_possible(stacks_)) {
    partial_ = 0;
    pending_ = 0;
    return false;
  }
  return true;
}

inline bool GrammarMatcher::accept(std::string_view bytes) {
  GrammarMatcher copy = *this;
  for (char c : bytes)
    if (!copy.accept_byte(uint8_t(c))) return false;
  *this = std::move(copy);
  return true;
}

inline bool GrammarMatcher::complete() const {
  return pending_ == 0 && std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

inline bool GrammarMatcher::allows(std::string_view bytes) const {
  GrammarMatcher copy = *this;
  return copy.accept(bytes);
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_GBNF_HPP
