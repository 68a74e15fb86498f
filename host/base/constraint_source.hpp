// What a request constrains its output to (structured output, th_constraint.h): the form the client
// gave and its GBNF, which every constraint plugin receives.
#pragma once

#include <string>

namespace tokenhost {

struct ConstraintSource {
  std::string type;  // "json_schema", "json_object" or "gbnf" (th_constraint_source.type)
  std::string text;  // the schema (compact JSON), "" for json_object, or the grammar
  std::string gbnf;  // the same language as GBNF (start rule root)
  // What programs are cached by: one compiled program per distinct key.
  std::string key() const { return type + '\n' + text; }
  // How log lines and errors name it: the type and the text's size.
  std::string describe() const { return type + (text.empty() ? "" : " (" + std::to_string(text.size()) + " bytes)"); }
};

}  // namespace tokenhost
