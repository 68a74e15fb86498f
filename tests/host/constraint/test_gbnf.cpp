// GBNF grammars (the SDK's tokenhost/gbnf.hpp): the syntax and its errors, repetition, classes, UTF-8 read a
// byte at a time, and a JSON grammar against nlohmann's parser on fresh random documents: every
// document (compact) is accepted whole, every prefix is accepted, and whatever the grammar accepts
// whole after random edits, nlohmann accepts as JSON.
#include <catch2/catch.hpp>

#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include <tokenhost/gbnf.hpp>
#include "harness.hpp"

namespace constraint_gbnf_tests {

using namespace tokenhost::sdk;
using tokenhost::testing::fresh_rng;

namespace {

std::shared_ptr<const Grammar> grammar(const std::string& text) { return std::make_shared<const Grammar>(parse_gbnf(text)); }

// Whether the grammar takes text whole.
bool whole(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.complete();
}

// JSON without insignificant whitespace (what a compact dump writes).
const char* kJson = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( member ( "," member )* )? "}"
member ::= string ":" value
array  ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
)";

nlohmann::json random_json(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth > 3 ? 5 : 7)) {
    case 0: return nullptr;
    case 1: return bool(rng() % 2);
    case 2: return int64_t(rng() % 2000) - 1000;
    case 3: return double(int64_t(rng() % 200000) - 100000) / 64.0;
    case 4: {
      std::string s;
      for (size_t i = rng() % 8; i > 0; --i) {
        const uint32_t pick = uint32_t(rng() % 6);
        s += pick == 0 ? "\"" : pick == 1 ? "\\" : pick == 2 ? "\n" : pick == 3 ? "\xC3\xA9" : std::string(1, char('a' + rng() % 26));
      }
      return s;
    }
    case 5: {
      nlohmann::json a = nlohmann::json::array();
      for (size_t i = rng() % 4; i > 0; --i) a.push_back(random_json(rng, depth + 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (size_t i = rng() % 4; i > 0; --i) o[std::string(1, char('a' + rng() % 26))] = random_json(rng, depth + 1);
      return o;
    }
  }
}

}  // namespace

TEST_CASE("gbnf: literals, classes, groups and repetition", "[constraint][gbnf]") {
  auto g = grammar("root ::= \"a\"{2,4} ( \"b\" | [x-z]+ )? # a comment\n");
  for (const char* ok : {"aa", "aaa", "aaaa", "aab", "aaxyz", "aaaaz"}) CHECK(whole(g, ok));
  for (const char* bad : {"a", "aaaaa", "aabb", "aaw", ""}) CHECK_FALSE(whole(g, bad));
  g = grammar("root ::= ( \"ab\" )+ \"c\"?\n");
  CHECK(whole(g, "ab"));
  CHECK(whole(g, "ababc"));
  CHECK_FALSE(whole(g, "abc" "c"));
  g = grammar("root ::= \"\\\"\" [^\"]* \"\\\"\"");
  CHECK(whole(g, "\"hello world\""));
  CHECK_FALSE(whole(g, "\"a\"b\""));
  g = grammar("root ::= x{3,}\nx ::= \"x\"");
  CHECK_FALSE(whole(g, "xx"));
  CHECK(whole(g, "xxxxxxx"));
}

TEST_CASE("gbnf: UTF-8 is read a byte at a time, a character held until whole", "[constraint][gbnf]") {
  auto g = grammar("root ::= [\\u03B1-\\u03C9]+ \"!\"");
  GrammarMatcher m(g);
  CHECK(m.accept("\xCE\xB1"));                  // α
  CHECK(m.accept_byte(0xCF));                   // the first byte of ω (U+03C9: CF 89)
  CHECK_FALSE(m.complete());
  CHECK_FALSE(m.accept_byte(0x41));             // not a continuation byte
  CHECK(m.accept_byte(0x89));
  CHECK(m.allows("!"));
  CHECK_FALSE(m.allows("a"));
  CHECK_FALSE(m.allows("\xE4"));                // a three-byte character cannot be Greek
  CHECK(m.accept("!"));
  CHECK(m.complete());
  CHECK_FALSE(m.accept("!"));  // refused whole: the state stays complete
  CHECK(m.complete());
}

TEST_CASE("gbnf: overlong UTF-8, surrogates and code points past U+10FFFF are refused", "[constraint][gbnf]") {
  // A model with byte tokens can write any byte: '{' spelled in two or four bytes is not '{'.
  GrammarMatcher brace(grammar("root ::= \"{\""));
  CHECK_FALSE(brace.allows("\xC1\xBB"));
  CHECK_FALSE(brace.allows("\xE0\x81\xBB"));
  CHECK_FALSE(brace.allows("\xF0"));  // no four-byte character is '{': refused at its first byte
  CHECK(brace.allows("{"));
  GrammarMatcher any(grammar("root ::= [^a]"));
  CHECK(any.allows("\xC3\xA9"));           // é
  CHECK(any.allows("\xF4\x8F\xBF\xBF"));   // U+10FFFF
  CHECK_FALSE(any.allows("\xF4\x90"));      // past U+10FFFF
  CHECK_FALSE(any.allows("\xED\xA0"));      // a surrogate (U+D800..)
  CHECK(any.allows("\xED\x9F\xBF"));       // U+D7FF
  CHECK_FALSE(any.allows("\xC0\x80"));      // overlong NUL
}

TEST_CASE("gbnf: errors name the line and column", "[constraint][gbnf]") {
  CHECK_THROWS_WITH(parse_gbnf("root ::= x\n"), Catch::Contains("1:10: rule 'x' is used but never defined"));
  CHECK_THROWS_WITH(parse_gbnf("a ::= \"a\"\n"), Catch::Contains("no rule 'root'"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= root \"a\" | \"a\"\n"), Catch::Contains("left-recursive"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= x\nx ::= y \"a\"\ny ::= \"b\"? x\n"), Catch::Contains("left-recursive"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= \"abc\n"), Catch::Contains("without its closing"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= [a-\n"), Catch::Contains("grammar:1:"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= \"\\q\"\n"), Catch::Contains("unknown escape"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= \"a\"{3,2}\n"), Catch::Contains("maximum is under its minimum"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= \"a\"\n\nroot ::= \"b\"\n"), Catch::Contains("3:1: rule 'root' is defined twice"));
  CHECK_THROWS_WITH(parse_gbnf("root ::= *\n"), Catch::Contains("repeats nothing"));
}

TEST_CASE("gbnf: a JSON grammar against nlohmann's parser on random documents", "[constraint][gbnf][json]") {
  auto rng = fresh_rng("gbnf json");
  auto g = grammar(kJson);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_json(rng, 0).dump();
    INFO(text);
    GrammarMatcher m(g);
    for (char c : text) REQUIRE(m.accept_byte(uint8_t(c)));  // every prefix is a viable one
    CHECK(m.complete());
    // Edits: whatever the grammar takes whole, nlohmann parses.
    for (int k = 0; k < 20; ++k) {
      std::string edited = text;
      const size_t at = rng() % (edited.size() + 1);
      static const std::string alphabet = "{}[]\",:0123456789.-eE+ntrufals\\";
      if (rng() % 2 && at < edited.size()) edited.erase(at, 1);
      else edited.insert(at, 1, alphabet[rng() % alphabet.size()]);
      INFO("edited: " << edited);
      // nlohmann refuses a number past double's range, which is JSON all the same: such edits are left out.
      static const std::regex huge_exponent("[eE][-+]?[0-9]{3,}");
      if (whole(g, edited) && !std::regex_search(edited, huge_exponent)) CHECK(nlohmann::json::accept(edited));
    }
  }
}

}  // namespace constraint_gbnf_tests
