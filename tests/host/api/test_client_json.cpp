// Client JSON: bounded depth and value count, refused while parsing; numbers out of range named by their field.
#include <catch2/catch.hpp>

#include <chrono>

#include "api/client_json.hpp"

namespace api_client_json_tests {

using namespace tokenhost::api;
using Catch::Matchers::Contains;

TEST_CASE("client json: nesting past the limit is refused while parsing, at any depth past it", "[api]") {
  for (size_t depth : {size_t(65), size_t(1000), size_t(50000)}) {
    INFO(depth);
    const std::string text = "{\"config\": {\"x\": " + std::string(depth, '[') + std::string(depth, ']') + "}}";
    const auto started = std::chrono::steady_clock::now();
    auto r = parse_client_json(text);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.error().http_status == 400);
    REQUIRE(r.error().code == "invalid_json");
    REQUIRE_THAT(r.error().message, Contains("deeper than 64 levels"));
    REQUIRE(std::chrono::steady_clock::now() - started < std::chrono::seconds(1));
  }
  // Up to the limit it parses: 64 levels in all (the object, then 63 arrays).
  const std::string ok = "{\"x\": " + std::string(63, '[') + std::string(63, ']') + "}";
  auto r = parse_client_json(ok);
  REQUIRE(r.ok());
  REQUIRE(r.value()["x"].is_array());
  const std::string over = "{\"x\": " + std::string(64, '[') + std::string(64, ']') + "}";
  REQUIRE_FALSE(parse_client_json(over).ok());
}

TEST_CASE("client json: a number out of range names its field, malformed text names the byte", "[api]") {
  auto r = parse_client_json(R"({"model": "m", "temperature": 1e400})");
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().http_status == 400);
  REQUIRE(r.error().param == "temperature");
  REQUIRE_THAT(r.error().message, Contains("'temperature' is out of range"));
  auto bad = parse_client_json(R"({"model": "m",})");
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.error().message, Contains("not valid JSON (byte 15)"));
  auto fine = parse_client_json(R"({"a": [1, 2.5, "x", null, {"b": true}]})");
  REQUIRE(fine.ok());
  REQUIRE(fine.value()["a"][4]["b"] == true);
}

TEST_CASE("client json: a body of more values than the limit is refused while parsing, one within it is read", "[api]") {
  auto array_of = [](size_t n, const std::string& item) {
    std::string s = "{\"prompt\": [";
    for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + item;
    return s + "]}";
  };
  // The object and the array count too.
  CHECK(parse_client_json(array_of(kMaxJsonValues - 2, "1")).ok());
  auto r = parse_client_json(array_of(kMaxJsonValues - 1, "1"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().http_status == 400);
  CHECK_THAT(r.error().message, Catch::Contains("more than " + std::to_string(kMaxJsonValues) + " JSON values"));
  // Short strings, the costliest values per byte of body, are refused as well.
  CHECK_FALSE(parse_client_json(array_of(kMaxJsonValues, "\"a\"")).ok());
  CHECK(parse_client_json(array_of(10, "\"a\""), 64, 12).ok());
  CHECK_FALSE(parse_client_json(array_of(11, "\"a\""), 64, 12).ok());
}

}  // namespace api_client_json_tests
