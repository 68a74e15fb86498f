#include "api/response_format.hpp"

#include <tokenhost/gbnf.hpp>

#include "constraint/json_schema.hpp"

namespace tokenhost::api {

using nlohmann::ordered_json;

namespace {
std::string type_of(const ordered_json& v) { return v.type_name(); }
}  // namespace

ApiResult<std::shared_ptr<const ConstraintSource>> parse_response_format(const ordered_json& v) {
  if (!v.is_object())
    return invalid_request("response_format", "'response_format' must be an object such as {\"type\": \"json_object\"}, got " + type_of(v));
  auto type = v.find("type");
  if (type == v.end() || !type->is_string())
    return invalid_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::shared_ptr<const ConstraintSource>();
  auto source = std::make_shared<ConstraintSource>();
  if (t == "json_object") {
    source->type = "json_object";
    source->gbnf = constraint::json_object_gbnf();
    return std::shared_ptr<const ConstraintSource>(std::move(source));
  }
  if (t != "json_schema")
    return invalid_request("response_format.type",
                           "'response_format.type' is \"" + t + "\"; expected \"text\", \"json_object\" or \"json_schema\"");
  auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object())
    return invalid_request("response_format.json_schema",
                           "'response_format.json_schema' must be an object with the schema under \"schema\"");
  for (const auto& [key, value] : js->items())
    if (key != "name" && key != "schema" && key != "strict" && key != "description")
      return invalid_request("response_format.json_schema." + key,
                             "unknown field '" + key + "' (json_schema takes 'name', 'description', 'schema' and 'strict')");
  if (auto strict = js->find("strict"); strict != js->end() && !strict->is_boolean() && !strict->is_null())
    return invalid_request("response_format.json_schema.strict", "'strict' must be a boolean, got " + type_of(*strict));
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null())
    return invalid_request("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
  try {
    source->gbnf = constraint::json_schema_to_gbnf(*schema);
  } catch (const constraint::SchemaError& e) {
    return invalid_request("response_format.json_schema.schema" + (e.path.empty() ? std::string() : e.path), e.what());
  }
  source->type = "json_schema";
  source->text = schema->dump();
  return std::shared_ptr<const ConstraintSource>(std::move(source));
}

ApiResult<std::shared_ptr<const ConstraintSource>> parse_grammar(const nlohmann::json& v) {
  if (!v.is_string())
    return invalid_request("tokenhost.grammar", "'tokenhost.grammar' must be a string of GBNF rules, got " + std::string(v.type_name()));
  auto source = std::make_shared<ConstraintSource>();
  source->type = "gbnf";
  source->text = v.get<std::string>();
  try {
    sdk::parse_gbnf(source->text);
  } catch (const std::invalid_argument& e) {
    return invalid_request("tokenhost.grammar", std::string("'tokenhost.grammar': ") + e.what());
  }
  source->gbnf = source->text;
  return std::shared_ptr<const ConstraintSource>(std::move(source));
}

}  // namespace tokenhost::api
