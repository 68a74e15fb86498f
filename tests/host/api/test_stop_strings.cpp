// The streaming stop-string matcher: whatever the token boundaries, the text it releases is the text
// before the first stop string, and no released piece ends in half a character.
#include <catch2/catch.hpp>

#include "api/stop_strings.hpp"
#include "harness.hpp"

namespace api_stop_strings_tests {

using namespace tokenhost::api;
using namespace tokenhost::testing;

namespace {

bool valid_utf8(const std::string& s) { return incomplete_utf8_suffix(s) == 0; }

// Every character is complete (the matcher's pieces are checked with this, not full validation).
bool complete_characters(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    i += len;
  }
  return true;
}

// Splits text at random byte positions (possibly inside characters) into pieces.
std::vector<std::string> random_split(std::mt19937_64& rng, const std::string& text) {
  std::vector<std::string> pieces;
  std::uniform_int_distribution<size_t> len(0, 6);
  for (size_t at = 0; at < text.size();) {
    size_t n = std::min(len(rng), text.size() - at);
    pieces.push_back(text.substr(at, n));
    at += n;
  }
  return pieces;
}

struct Streamed {
  std::string text;
  bool stopped = false;
  std::string stop;
};

Streamed stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  Streamed s;
  for (const auto& p : pieces) {
    auto out = m.feed(p);
    REQUIRE(complete_characters(out.text));
    s.text += out.text;
    if (out.stopped) {
      s.stopped = true;
      s.stop = out.stop;
      break;
    }
  }
  if (!s.stopped) s.text += m.finish();
  return s;
}

std::string truncate_at_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& s : stops) first = std::min(first, text.find(s));
  return first == std::string::npos ? text : text.substr(0, first);
}

}  // namespace

TEST_CASE("stop strings: a stop split over pieces is found and not emitted", "[api][stop]") {
  auto s = stream({"\nUser:"}, {"Hello", " there\n", "Us", "er:", " more"});
  REQUIRE(s.stopped);
  REQUIRE(s.stop == "\nUser:");
  REQUIRE(s.text == "Hello there");
}

TEST_CASE("stop strings: text that only looks like a stop start is released once disproved", "[api][stop]") {
  StopMatcher m({"END"});
  auto a = m.feed("the EN");
  REQUIRE(a.text == "the ");
  REQUIRE(m.held() == 2);
  auto b = m.feed("D? no, ENZ");
  // "END" was completed by "D": stop, text before it only.
  REQUIRE(b.stopped);
  REQUIRE(b.text == "");
  REQUIRE(m.feed("more").text.empty());
  REQUIRE(m.finish().empty());

  StopMatcher k({"END"});
  REQUIRE(k.feed("the EN").text == "the ");
  REQUIRE(k.feed("Z").text == "ENZ");
  REQUIRE(k.finish().empty());
}

TEST_CASE("stop strings: the earliest of several stops wins, and finish flushes a held prefix", "[api][stop]") {
  auto s = stream({"cd", "b"}, {"abcd"});
  REQUIRE(s.stop == "b");
  REQUIRE(s.text == "a");

  StopMatcher m({"###"});
  REQUIRE(m.feed("x##").text == "x");
  REQUIRE(m.finish() == "##");
}

TEST_CASE("stop strings: no stops passes text through", "[api][stop]") {
  StopMatcher m;
  REQUIRE(m.feed("abc").text == "abc");
  REQUIRE(m.held() == 0);
  REQUIRE(m.finish().empty());
}

TEST_CASE("stop strings: incomplete UTF-8 is held until its character completes", "[api][stop][utf8]") {
  const std::string euro = "\xE2\x82\xAC";          // U+20AC, 3 bytes
  const std::string emoji = "\xF0\x9F\x98\x80";      // U+1F600, 4 bytes
  StopMatcher m;
  REQUIRE(m.feed("a" + euro.substr(0, 1)).text == "a");
  REQUIRE(m.feed(euro.substr(1, 1)).text == "");
  REQUIRE(m.feed(euro.substr(2) + emoji.substr(0, 3)).text == euro);
  REQUIRE(m.held() == 3);
  REQUIRE(m.feed(emoji.substr(3)).text == emoji);

  // At the end an unfinished character is released as it is.
  StopMatcher e;
  REQUIRE(e.feed("x\xC3").text == "x");
  REQUIRE(e.finish() == "\xC3");

  // Invalid bytes are not held: waiting cannot complete them.
  StopMatcher bad;
  REQUIRE(bad.feed("a\xFF").text == "a\xFF");
  REQUIRE(bad.feed("\x80").text == "\x80");

  REQUIRE(incomplete_utf8_suffix("") == 0);
  REQUIRE(incomplete_utf8_suffix("abc") == 0);
  REQUIRE(incomplete_utf8_suffix(euro) == 0);
  REQUIRE(incomplete_utf8_suffix(euro.substr(0, 2)) == 2);
  REQUIRE(incomplete_utf8_suffix(emoji.substr(0, 1)) == 1);
}

TEST_CASE("stop strings: random splits give the text before the first stop", "[api][stop][utf8]") {
  auto rng = fresh_rng("stop strings random splits");
  // Multi-byte characters among ASCII, and stops that share prefixes with each other and the text.
  const std::vector<std::string> alphabet = {"a", "b", "c", " ", "\n", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
  const std::vector<std::vector<std::string>> stop_sets = {
      {}, {"abc"}, {"\n\n"}, {"ab", "bca"}, {"\xE2\x82\xAC" "a"}, {"c\xC3\xA9", "aaa", "\xF0\x9F\x98\x80 ", "b\n"}};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1), length(0, 40);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    for (size_t i = length(rng); i > 0; --i) text += alphabet[pick(rng)];
    const auto& stops = stop_sets[size_t(trial) % stop_sets.size()];
    auto pieces = random_split(rng, text);
    auto s = stream(stops, pieces);
    INFO("text: " << text);
    std::string expected = truncate_at_stop(text, stops);
    REQUIRE(s.text == expected);
    REQUIRE(s.stopped == (expected.size() != text.size()));
    REQUIRE(valid_utf8(s.text));
  }
}

}  // namespace api_stop_strings_tests
