// JSON Schema to GBNF (the SDK's tokenhost/gbnf.hpp): the subset OpenAI's structured outputs take in strict mode,
// each schema compiled to a grammar whose sentences are the JSON documents it validates (whitespace
// between tokens allowed, a newline and up to 20 spaces or tabs at most at a time): what
// response_format and required tool calls are constrained by (api/response_format.hpp, api/tools.hpp).
//
// The subset: "type" (string, number, integer, boolean, null, object, array, or a list of them),
// "enum" and "const" (of any JSON values), "anyOf", "$ref" to "#/$defs/NAME" or "#/definitions/NAME"
// (recursion allowed), objects with "properties" in their order, "required" (the others may be left
// out, in order), "additionalProperties": false (or absent: no other member either), arrays with
// "items", "minItems" and "maxItems", strings with "format" date, time, date-time, uuid, email.
// Annotations ("description", "title", "default", "examples", "$schema", "strict", "$comment") are
// ignored. Anything else is refused, naming the keyword and where it is.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace tokenhost::constraint {

// Refusal of a schema: `path` is the JSON pointer of the schema object at fault ("" the root).
struct SchemaError : std::invalid_argument {
  SchemaError(std::string path, const std::string& what)
      : std::invalid_argument("json_schema" + (path.empty() ? std::string() : " at " + path) + ": " + what), path(std::move(path)) {}
  std::string path;
};

// The GBNF text of schema's documents (start rule `root`): members in the order the schema lists its
// properties (an ordered_json keeps the order the client wrote). Throws SchemaError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// A grammar of any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace tokenhost::constraint
