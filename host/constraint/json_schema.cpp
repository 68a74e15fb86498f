#include "constraint/json_schema.hpp"

#include <map>
#include <set>
#include <vector>

namespace tokenhost::constraint {

namespace {

using json = nlohmann::ordered_json;

// The rules every compiled schema may use. A date is a day of the Gregorian calendar (RFC 3339's
// full-date, as JSON Schema validators check it): February 29 only in a leap year (divisible by 4, and a
// century only when divisible by 400).
const char* kCommonRules = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
integer ::= "-"? ( "0" | [1-9] [0-9]* )
boolean ::= "true" | "false"
null ::= "null"
value ::= object-any | array-any | string | number | boolean | null
object-any ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array-any ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
date ::= "\"" date-text "\""
date-text ::= [0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( day-1-28 | "29" | "3" [01] ) | ( "0" [469] | "11" ) "-" ( day-1-28 | "29" | "30" ) | "02-" day-1-28 ) | leap-year "-02-29"
day-1-28 ::= "0" [1-9] | "1" [0-9] | "2" [0-8]
leap-year ::= [0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) "00"
time ::= "\"" time-text "\""
time-text ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]+ )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
date-time ::= "\"" date-text "T" time-text "\""
uuid ::= "\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\""
email ::= "\"" [^@"\\\x00-\x20]+ "@" [^@"\\\x00-\x20]+ "\""
)";

// Keys a schema may hold that change nothing here: annotations, and the definitions $ref reads.
const std::set<std::string> kAnnotations = {"description", "title", "default", "examples", "$schema", "strict", "$comment", "$id",
                                            "$defs", "definitions"};

// A GBNF literal matching text exactly.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  std::string compile() {
    const std::string top = rule_for(root_, "");
    std::string out = "root ::= ws " + top + " ws\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + kCommonRules;
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) { throw SchemaError(path, what); }

  std::string new_rule(const std::string& body) {
    const std::string name = "s" + std::to_string(rules_.size() + reserved_);
    rules_[name] = body;
    return name;
  }

  void check_keys(const json& s, const std::string& path, const std::set<std::string>& allowed) {
    for (const auto& [key, value] : s.items()) {
      if (allowed.count(key) || kAnnotations.count(key)) continue;
      fail(path, "'" + key + "' is not supported (structured output takes OpenAI's strict subset of JSON Schema)");
    }
  }

  // The rule (or rule expression) matching the documents s validates.
  std::string rule_for(const json& s, const std::string& path) {
    if (!s.is_object()) fail(path, "a schema must be an object");
    if (s.contains("$ref")) {
      check_keys(s, path, {"$ref"});
      return ref(s["$ref"], path);
    }
    if (s.contains("anyOf")) {
      check_keys(s, path, {"anyOf", "$defs", "definitions"});
      const json& any = s["anyOf"];
      if (!any.is_array() || any.empty()) fail(path + "/anyOf", "must be a non-empty array of schemas");
      std::string body;
      for (size_t i = 0; i < any.size(); ++i) body += (i ? " | " : "") + rule_for(any[i], path + "/anyOf/" + std::to_string(i));
      return new_rule(body);
    }
    if (s.contains("const")) {
      check_keys(s, path, {"const", "type"});
      return literal(s["const"].dump());
    }
    if (s.contains("enum")) {
      check_keys(s, path, {"enum", "type"});
      const json& values = s["enum"];
      if (!values.is_array() || values.empty()) fail(path + "/enum", "must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < values.size(); ++i) body += (i ? " | " : "") + literal(values[i].dump());
      return new_rule(body);
    }
    if (!s.contains("type")) fail(path, "a schema needs 'type' (or enum, const, anyOf, $ref)");
    const json& type = s["type"];
    if (type.is_array()) {
      if (type.empty()) fail(path + "/type", "an empty list of types");
      std::string body;
      for (size_t i = 0; i < type.size(); ++i) {
        json one = s;
        one["type"] = type[i];
        body += (i ? " | " : "") + rule_for(one, path);
      }
      return new_rule(body);
    }
    if (!type.is_string()) fail(path + "/type", "must be a type name or a list of them");
    const std::string t = type.get<std::string>();
    if (t == "object") return object(s, path);
    if (t == "array") return array(s, path);
    if (t == "string") return string(s, path);
    if (t == "number" || t == "integer" || t == "boolean" || t == "null") {
      check_keys(s, path, {"type", "$defs", "definitions"});
      return t;
    }
    fail(path + "/type", "unknown type '" + t + "'");
  }

  std::string ref(const json& target, const std::string& path) {
    if (!target.is_string()) fail(path + "/$ref", "must be a string");
    const std::string r = target.get<std::string>();
    std::string section;
    if (r.rfind("#/$defs/", 0) == 0) section = "$defs";
    else if (r.rfind("#/definitions/", 0) == 0) section = "definitions";
    else fail(path + "/$ref", "'" + r + "': only references to #/$defs/NAME or #/definitions/NAME are supported");
    const std::string name = r.substr(section.size() + 3);
    if (!root_.contains(section) || !root_[section].contains(name)) fail(path + "/$ref", "'" + r + "' names no definition");
    auto it = refs_.find(r);
    if (it != refs_.end()) return it->second;
    // Named before it is compiled: a definition may refer to itself.
    const std::string rule = "s" + std::to_string(rules_.size() + reserved_++);
    refs_[r] = rule;
    const std::string body = rule_for(root_[section][name], "/" + section + "/" + name);
    rules_[rule] = body;
    --reserved_;
    return rule;
  }

  std::string object(const json& s, const std::string& path) {
    check_keys(s, path, {"type", "properties", "required", "additionalProperties", "$defs", "definitions"});
    if (s.contains("additionalProperties") && s["additionalProperties"] != false)
      fail(path + "/additionalProperties", "must be false (an object's members are its properties)");
    const json props = s.value("properties", json::object());
    if (!props.is_object()) fail(path + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path + "/required", "must be an array of property names");
      for (const auto& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>()))
          fail(path + "/required", "names " + r.dump() + ", which is not one of the properties");
        required.insert(r.get<std::string>());
      }
    }
    // Members in the properties' order; after the first, each is ", member". first_i: nothing written
    // yet, members i.. to come; rest_i: something written.
    std::vector<std::string> members;
    std::vector<bool> optional;
    for (const auto& [name, sub] : props.items()) {
      members.push_back(literal(json(name).dump()) + " ws \":\" ws " + rule_for(sub, path + "/properties/" + name) + " ws");
      optional.push_back(!required.count(name));
    }
    std::string first = "", rest = "";  // rules for i = k + 1: nothing
    for (size_t i = members.size(); i-- > 0;) {
      const std::string next_rest = rest.empty() ? "" : " " + rest;
      // An alternative that matches nothing is written ( ... )?: GBNF reads past a newline after '|'.
      auto either = [&](const std::string& a, const std::string& b) {
        return !optional[i] ? a : b.empty() ? "( " + a + " )?" : a + " | " + b;
      };
      const std::string r = new_rule(either("\",\" ws " + members[i] + next_rest, rest));
      const std::string f = new_rule(either(members[i] + next_rest, first));
      rest = r;
      first = f;
    }
    return new_rule("\"{\" ws " + first + (first.empty() ? "" : " ") + "\"}\"");
  }

  std::string array(const json& s, const std::string& path) {
    check_keys(s, path, {"type", "items", "minItems", "maxItems", "$defs", "definitions"});
    const std::string item = s.contains("items") ? rule_for(s["items"], path + "/items") : "value";
    auto count = [&](const char* key, int64_t fallback) {
      if (!s.contains(key)) return fallback;
      if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 || s[key].get<int64_t>() > 1000)
        fail(path + "/" + key, "must be a count from 0 to 1000");
      return s[key].get<int64_t>();
    };
    const int64_t min = count("minItems", 0), max = count("maxItems", -1);
    if (max >= 0 && max < min) fail(path + "/maxItems", "is under minItems");
    if (max == 0) return new_rule("\"[\" ws \"]\"");
    const std::string more = "\",\" ws " + item + " ws";
    std::string bound = max < 0 ? "*" : "{" + std::to_string(min > 0 ? min - 1 : 0) + "," + std::to_string(max - 1) + "}";
    if (max < 0 && min > 1) bound = "{" + std::to_string(min - 1) + ",}";
    const std::string items = item + " ws ( " + more + " )" + bound;
    return new_rule("\"[\" ws " + (min > 0 ? items : "( " + items + " )?") + " \"]\"");
  }

  std::string string(const json& s, const std::string& path) {
    check_keys(s, path, {"type", "format", "minLength", "maxLength", "$defs", "definitions"});
    if (s.contains("format")) {
      static const std::set<std::string> formats = {"date", "time", "date-time", "uuid", "email"};
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      if (!formats.count(f)) fail(path + "/format", "'" + s["format"].dump() + "' is not one of date, time, date-time, uuid, email");
      if (s.contains("minLength") || s.contains("maxLength")) fail(path, "a format with minLength or maxLength is not supported");
      return f;
    }
    if (!s.contains("minLength") && !s.contains("maxLength")) return "string";
    auto count = [&](const char* key, int64_t fallback) {
      if (!s.contains(key)) return fallback;
      if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 || s[key].get<int64_t>() > 1000)
        fail(path + "/" + key, "must be a count from 0 to 1000");
      return s[key].get<int64_t>();
    };
    const int64_t min = count("minLength", 0), max = count("maxLength", -1);
    if (max >= 0 && max < min) fail(path + "/maxLength", "is under minLength");
    return new_rule("\"\\\"\" char{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "} \"\\\"\"");
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
  size_t reserved_ = 0;  // rule numbers taken by references still being compiled
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Compiler(schema).compile(); }

std::string json_object_gbnf() { return std::string("root ::= ws object-any ws\n") + kCommonRules; }

}  // namespace tokenhost::constraint
