// JSON sent by clients (request bodies on both ports), parsed with bounded cost: nesting deeper than
// kMaxJsonDepth is refused while parsing, before the rest is read (the handlers that walk the value,
// such as an admin change's JSON-to-TOML conversion, recurse, and a value nested 50,000 deep would
// overflow their stack), so is a body of more than kMaxJsonValues values (the parsed document's memory),
// and a number past the range of a double is refused naming its field.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "api/api_error.hpp"

namespace tokenhost::api {

constexpr int kMaxJsonDepth = 64;
// Values (numbers, strings, objects, arrays, ...) one body may hold: bounds the parsed document at a few
// times the largest body (8 MiB: a value costs 16 bytes, a short string 32 more), whatever its shape.
// 16 prompts of 32768 token ids fit.
constexpr size_t kMaxJsonValues = size_t(1) << 19;

// The value, or a 400 invalid_request_error with code "invalid_json" saying what is wrong and where.
ApiResult<nlohmann::json> parse_client_json(std::string_view text, int max_depth = kMaxJsonDepth,
                                            size_t max_values = kMaxJsonValues);

}  // namespace tokenhost::api
