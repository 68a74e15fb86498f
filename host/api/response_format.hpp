// Structured output as a request asks for it: OpenAI's `response_format` ({"type": "text"},
// {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}) and
// the `tokenhost.grammar` extension (a GBNF grammar), each checked and turned into the constraint the
// engine's constraint plugin compiles (base/constraint_source.hpp). A schema outside the subset
// constraint/json_schema.hpp takes, or a grammar that does not parse, is a 400 naming the field and,
// inside it, the schema path or the grammar's line and column.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "api/api_error.hpp"
#include "base/constraint_source.hpp"

namespace tokenhost::api {

// NULL for {"type": "text"} (no constraint). An ordered_json keeps the schema's members in the order
// the client wrote them: objects are generated in that order.
ApiResult<std::shared_ptr<const ConstraintSource>> parse_response_format(const nlohmann::ordered_json& v);

// tokenhost.grammar: GBNF text, start rule `root`.
ApiResult<std::shared_ptr<const ConstraintSource>> parse_grammar(const nlohmann::json& v);

}  // namespace tokenhost::api
