// JSON Schema to GBNF (constraint/json_schema.hpp): for fresh random schemas of the supported subset,
// random documents they validate are sentences of the compiled grammar (compact and indented), and
// documents that break them (a required member left out, a member too many, a value of another type)
// are not; a schema outside the subset is refused naming the keyword and where it is.
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>

#include <tokenhost/gbnf.hpp>
#include "constraint/json_schema.hpp"
#include "harness.hpp"

namespace constraint_json_schema_tests {

using namespace tokenhost::constraint;
using namespace tokenhost::sdk;
using json = nlohmann::ordered_json;
using tokenhost::testing::fresh_rng;

namespace {

bool whole(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept(text) && m.complete();
}

json random_schema(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth >= 3 ? 6 : 9)) {
    case 0: return {{"type", "string"}};
    case 1: return {{"type", "integer"}};
    case 2: return {{"type", "number"}};
    case 3: return {{"type", "boolean"}};
    case 4: return {{"enum", {"red", "green", 3, nullptr}}};
    case 5: {
      static const char* formats[] = {"date", "time", "date-time", "uuid", "email"};
      return {{"type", "string"}, {"format", formats[rng() % 5]}};
    }
    case 6: {
      json s = {{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      if (rng() % 2) s["minItems"] = rng() % 3;
      if (rng() % 2) s["maxItems"] = s.value("minItems", 0) + rng() % 3;
      return s;
    }
    case 7: return {{"type", {"string", "null"}}};
    default: {
      json props = json::object(), required = json::array();
      for (size_t i = rng() % 4; i > 0; --i) {
        const std::string name = std::string(1, char('a' + rng() % 6)) + std::to_string(i);
        props[name] = random_schema(rng, depth + 1);
        if (rng() % 3) required.push_back(name);
      }
      return {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
    }
  }
}

json random_instance(std::mt19937_64& rng, const json& s) {
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()];
  const json& type = s["type"];
  if (type.is_array()) return rng() % 2 ? json("x\"y") : json(nullptr);
  const std::string t = type;
  if (t == "string") {
    const std::string f = s.value("format", "");
    if (f == "date") return "2026-12-0" + std::to_string(1 + rng() % 9);
    if (f == "time") return "12:34:5" + std::to_string(rng() % 10) + "Z";
    if (f == "date-time") return "2026-01-31T23:59:59.5+01:00";
    if (f == "uuid") return "123e4567-e89b-12d3-a456-42661417400" + std::to_string(rng() % 10);
    if (f == "email") return "user" + std::to_string(rng() % 100) + "@example.com";
    return std::string("t\\e\n\xC3\xA9") + char('a' + rng() % 26);
  }
  if (t == "integer") return int64_t(rng() % 2000) - 1000;
  if (t == "number") return double(int64_t(rng() % 20000) - 10000) / 8;
  if (t == "boolean") return bool(rng() % 2);
  if (t == "array") {
    const uint64_t min = s.value("minItems", 0), max = s.value("maxItems", min + 3);
    json a = json::array();
    for (uint64_t n = min + rng() % (max - min + 1); n > 0; --n) a.push_back(random_instance(rng, s["items"]));
    return a;
  }
  json o = json::object();
  for (const auto& [name, sub] : s["properties"].items()) {
    const bool required = std::find(s["required"].begin(), s["required"].end(), name) != s["required"].end();
    if (required || rng() % 2) o[name] = random_instance(rng, sub);
  }
  return o;
}

// The properties in the schema's order (nlohmann's objects sort their keys): dumped by hand.
std::string ordered(const json& schema, const json& value, int indent, int depth = 0) {
  const std::string nl = indent >= 0 ? "\n" + std::string(size_t(indent * (depth + 1)), ' ') : "";
  const std::string close = indent >= 0 ? "\n" + std::string(size_t(indent * depth), ' ') : "";
  if (value.is_object() && schema.contains("properties")) {
    std::string out = "{";
    bool first = true;
    for (const auto& [name, sub] : schema["properties"].items()) {
      if (!value.contains(name)) continue;
      out += (first ? "" : ",") + nl + json(name).dump() + (indent >= 0 ? ": " : ":") + ordered(sub, value[name], indent, depth + 1);
      first = false;
    }
    return out + (first ? "" : close) + "}";
  }
  if (value.is_array() && schema.contains("items")) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? "," : "") + nl + ordered(schema["items"], value[i], indent, depth + 1);
    return out + (value.empty() ? "" : close) + "]";
  }
  return value.dump();
}

}  // namespace

TEST_CASE("json schema: random documents of random schemas are the grammar's sentences and broken ones are not",
          "[constraint][json_schema]") {
  auto rng = fresh_rng("json schema");
  for (int i = 0; i < 60; ++i) {
    json schema = random_schema(rng, 0);
    if (i % 2 == 0) schema = {{"type", "object"}, {"properties", {{"x", schema}, {"y", {{"type", "integer"}}}}}, {"required", {"x", "y"}}};
    INFO("schema " << schema.dump());
    const auto g = std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(schema)));
    for (int k = 0; k < 5; ++k) {
      const json doc = random_instance(rng, schema);
      const std::string compact = ordered(schema, doc, -1), pretty = ordered(schema, doc, 2);
      INFO("document " << compact);
      CHECK(whole(g, compact));
      CHECK(whole(g, pretty));
      if (doc.is_object() && schema.contains("required") && !schema["required"].empty()) {
        json missing = doc;
        missing.erase(schema["required"][0].get<std::string>());
        CHECK_FALSE(whole(g, ordered(schema, missing, -1)));
        json extra = doc;
        extra["zz"] = 1;
        std::string text = ordered(schema, doc, -1);
        text.insert(text.size() - 1, std::string(doc.empty() ? "" : ",") + "\"zz\":1");
        CHECK_FALSE(whole(g, text));
        if (schema["properties"].contains("y")) {  // the wrapped schemas: y is an integer
          json wrong = doc;
          wrong["y"] = "not an integer";
          CHECK_FALSE(whole(g, ordered(schema, wrong, -1)));
        }
      }
    }
  }
}

TEST_CASE("json schema: a string of format date takes exactly the calendar's days, February 29 only in leap years",
          "[constraint][json_schema]") {
  const auto g = std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf({{"type", "string"}, {"format", "date"}})));
  // The reference: the proleptic Gregorian calendar, plainly.
  const auto is_day = [](int y, int m, int d) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[m - 1] + (m == 2 && leap ? 1 : 0);
  };
  const auto text = [](int y, int m, int d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "\"%04d-%02d-%02d\"", y, m, d);
    return std::string(buf);
  };
  int leap_days = 0;
  for (int y = 0; y <= 9999; ++y) {  // every year's February 29 (2425 of them are days)
    INFO(text(y, 2, 29));
    CHECK(whole(g, text(y, 2, 29)) == is_day(y, 2, 29));
    leap_days += is_day(y, 2, 29);
  }
  CHECK(leap_days == 2425);
  auto rng = fresh_rng("json schema dates");
  for (int i = 0; i < 4000; ++i) {  // fresh dates around every month's end, and some that are none
    const int y = int(rng() % 10000), m = int(rng() % 14), d = i % 2 ? 27 + int(rng() % 6) : int(rng() % 33);
    INFO(text(y, m, d));
    CHECK(whole(g, text(y, m, d)) == is_day(y, m, d));
  }
  CHECK_FALSE(whole(g, "\"2026-1-05\""));
  CHECK_FALSE(whole(g, "\"26-01-05\""));
}

TEST_CASE("json schema: references, recursion, anyOf and array bounds", "[constraint][json_schema]") {
  const json tree = {{"$defs", {{"node", {{"type", "object"},
                                           {"properties", {{"v", {{"type", "integer"}}}, {"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/node"}}}}}}},
                                           {"required", {"v", "kids"}}}}}},
                     {"$ref", "#/$defs/node"}};
  auto g = std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf(tree)));
  CHECK(whole(g, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  CHECK_FALSE(whole(g, R"({"v":1,"kids":[{"v":2}]})"));
  g = std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf({{"anyOf", {{{"type", "integer"}}, {{"const", "n/a"}}}}})));
  CHECK(whole(g, "42"));
  CHECK(whole(g, "\"n/a\""));
  CHECK_FALSE(whole(g, "\"n/b\""));
  g = std::make_shared<const Grammar>(parse_gbnf(json_schema_to_gbnf({{"type", "array"}, {"items", {{"type", "boolean"}}}, {"minItems", 2}, {"maxItems", 3}})));
  CHECK_FALSE(whole(g, "[true]"));
  CHECK(whole(g, "[true, false]"));
  CHECK(whole(g, "[true,false,true]"));
  CHECK_FALSE(whole(g, "[true,false,true,true]"));
  g = std::make_shared<const Grammar>(parse_gbnf(json_object_gbnf()));
  CHECK(whole(g, R"({"any": [1, {"thing": null}]})"));
  CHECK_FALSE(whole(g, "[1]"));
}

TEST_CASE("json schema: what is outside the subset is refused, naming it and where", "[constraint][json_schema]") {
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"pattern", "^x"}}}}}}),
                    Catch::Contains("json_schema at /properties/a: 'pattern' is not supported"));
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"type", "object"}, {"additionalProperties", true}}),
                    Catch::Contains("/additionalProperties: must be false"));
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"type", "object"}, {"properties", json::object()}, {"required", {"q"}}}),
                    Catch::Contains("/required: names \"q\""));
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"$ref", "#/$defs/none"}}), Catch::Contains("names no definition"));
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"type", "strin"}}), Catch::Contains("unknown type 'strin'"));
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"type", "string"}, {"format", "ipv4"}}), Catch::Contains("/format"));
  CHECK_THROWS_WITH(json_schema_to_gbnf({{"description", "no type"}}), Catch::Contains("needs 'type'"));
}

}  // namespace constraint_json_schema_tests
