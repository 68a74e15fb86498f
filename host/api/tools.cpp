#include "api/tools.hpp"

#include <set>

#include "constraint/json_schema.hpp"

namespace tokenhost::api {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::string call_id(std::mt19937_64& rng) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

// One call's schema: {"<name key>": the function's name, "<arguments key>": its parameters}.
ordered_json call_schema(const Tool& t, const char* arguments_key) {
  ordered_json props = ordered_json::object();
  props["name"] = {{"const", t.name}};
  props[arguments_key] = t.parameters.empty() ? ordered_json{{"type", "object"}} : t.parameters;
  return {{"type", "object"}, {"properties", props}, {"required", {"name", arguments_key}}, {"additionalProperties", false}};
}

// A JSON object starting at text[at] (a '{'), its end found by matching braces outside strings.
size_t object_end(const std::string& text, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// {"name": ..., "<arguments_key>": {...}} as a call, or false.
bool read_call(const std::string& text, const char* arguments_key, std::mt19937_64& rng, ToolCall& out) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const auto args = j.find(arguments_key);
  if (args == j.end() || !args->is_object()) return false;
  out = {call_id(rng), j["name"].get<std::string>(), args->dump()};
  return true;
}

}  // namespace

std::string_view tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::llama31: return "llama 3.1";
    case ToolFormat::hermes: return "hermes";
    case ToolFormat::none: break;
  }
  return "none";
}

ApiResult<std::vector<Tool>> parse_tools(const ordered_json& v) {
  if (!v.is_array()) return invalid_request("tools", std::string("'tools' must be an array of tools, got ") + v.type_name());
  std::vector<Tool> out;
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const ordered_json& t = v[i];
    if (!t.is_object() || t.value("type", "") != "function")
      return invalid_request(p + ".type", "each tool must be {\"type\": \"function\", \"function\": {...}}");
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) return invalid_request(p + ".function", "'" + p + ".function' must be an object");
    Tool tool;
    const auto name = f->find("name");
    if (name == f->end() || !name->is_string() || !valid_name(name->get<std::string>()))
      return invalid_request(p + ".function.name", "a function's name is 1 to 64 letters, digits, '_' or '-'");
    tool.name = name->get<std::string>();
    if (!names.insert(tool.name).second)
      return invalid_request(p + ".function.name", "two tools are named '" + tool.name + "'");
    if (auto d = f->find("description"); d != f->end() && d->is_string()) tool.description = d->get<std::string>();
    if (auto s = f->find("parameters"); s != f->end() && !s->is_null()) {
      if (!s->is_object()) return invalid_request(p + ".function.parameters", "'parameters' must be a JSON Schema object");
      tool.parameters = *s;
    }
    out.push_back(std::move(tool));
  }
  return out;
}

ApiResult<ToolRequest> parse_tool_choice(const json& v, ToolRequest r) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "none") r.choice = ToolChoice::none;
    else if (s == "auto") r.choice = ToolChoice::automatic;
    else if (s == "required") r.choice = ToolChoice::required;
    else return invalid_request("tool_choice", "'tool_choice' is \"" + s + "\"; expected \"none\", \"auto\", \"required\" or a function");
  } else if (v.is_object() && v.value("type", "") == "function" && v.contains("function") && v["function"].is_object() &&
             v["function"].contains("name") && v["function"]["name"].is_string()) {
    r.choice = ToolChoice::named;
    r.name = v["function"]["name"].get<std::string>();
  } else {
    return invalid_request("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}");
  }
  if (r.choice != ToolChoice::none && r.choice != ToolChoice::automatic && r.tools.empty())
    return invalid_request("tool_choice", "'tool_choice' asks for a call but 'tools' lists no function");
  if (r.choice == ToolChoice::named) {
    bool found = false;
    for (const Tool& t : r.tools) found = found || t.name == r.name;
    if (!found) return invalid_request("tool_choice", "'tool_choice' names function '" + r.name + "', which 'tools' does not list");
  }
  return r;
}

ApiResult<std::string> tool_call_grammar(const ToolRequest& r, ToolFormat format) {
  const char* arguments_key = format == ToolFormat::llama31 ? "parameters" : "arguments";
  ordered_json any = ordered_json::array();
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Tool& t = r.tools[i];
    if (r.choice == ToolChoice::named && t.name != r.name) continue;
    any.push_back(call_schema(t, arguments_key));
  }
  std::string gbnf;
  try {
    gbnf = constraint::json_schema_to_gbnf(any.size() == 1 ? any[0] : ordered_json{{"anyOf", any}});
  } catch (const constraint::SchemaError& e) {
    // Name the tool whose parameters are outside the subset.
    for (size_t i = 0; i < r.tools.size(); ++i) {
      try {
        constraint::json_schema_to_gbnf(r.tools[i].parameters.empty() ? ordered_json{{"type", "object"}} : r.tools[i].parameters);
      } catch (const constraint::SchemaError& inner) {
        return invalid_request("tools[" + std::to_string(i) + "].function.parameters" + inner.path, inner.what());
      }
    }
    return invalid_request("tools", e.what());
  }
  if (format != ToolFormat::hermes) return gbnf;
  // Hermes: each call inside <tool_call> tags, one or (parallel_tool_calls) more.
  const size_t at = gbnf.find("root ::=");
  gbnf.replace(at, 8, "tool-call-json ::=");
  const std::string one = "\"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"";
  return "root ::= " + one + (r.parallel_tool_calls ? " (\"\\n\" " + one + ")*" : std::string()) + "\n" + gbnf;
}

ToolAnswer parse_tool_answer(const std::string& text, ToolFormat format, std::mt19937_64& rng) {
  ToolAnswer out;
  if (format == ToolFormat::llama31) {
    ToolCall c;
    const std::string t = trim(text);
    if (!t.empty() && t[0] == '{' && object_end(t, 0) == t.size() && (read_call(t, "parameters", rng, c) || read_call(t, "arguments", rng, c)))
      out.calls.push_back(std::move(c));
    else
      out.content = text;
    return out;
  }
  if (format != ToolFormat::hermes) {
    out.content = text;
    return out;
  }
  size_t at = 0;
  for (;;) {
    const size_t open = text.find("<tool_call>", at);
    if (open == std::string::npos) break;
    const size_t close = text.find("</tool_call>", open);
    if (close == std::string::npos) break;
    ToolCall c;
    if (!read_call(trim(text.substr(open + 11, close - open - 11)), "arguments", rng, c)) break;
    out.content += text.substr(at, open - at);
    out.calls.push_back(std::move(c));
    at = close + 12;
  }
  out.content = trim(out.content + text.substr(at));
  if (out.calls.empty()) out.content = text;
  return out;
}

}  // namespace tokenhost::api
