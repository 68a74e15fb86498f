// A grammar in llama.cpp's GBNF (the format llama-server's `grammar` takes), compiled to flat rules,
// and a matcher that follows text through it a byte at a time: what a `constraint` plugin computes a
// sequence's allowed next tokens with. Work in progress for issue 34's structured output: no call
// site yet outside the tests.
//
// Accepted syntax: `name ::= alternatives` rules (names of letters, digits and '-'), alternatives
// separated by '|', sequences of "literal" strings (escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH),
// [character classes] (ranges a-z, negation [^...], the same escapes), rule names, ( groups ), and the
// postfix operators * + ? {m} {m,} {m,n}; '#' starts a comment to the end of the line. The start rule
// is `root`. Characters are Unicode code points; the matcher reads UTF-8 bytes, holding a partial
// character between bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokenhost::constraint {

// One element of a rule's alternative, flattened: a character set, a reference to another rule, or the
// end of an alternative / of a rule's alternatives.
struct GrammarElement {
  enum class Kind : uint8_t { end_alternative, end_rule, chars, rule_ref } kind;
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

}  // namespace tokenhost::constraint
