// Tool calling (`tools`, `tool_choice`): the request's functions, how the model's chat template asks for
// and writes calls (Llama 3.1's JSON, Hermes/Qwen2.5's <tool_call> tags), the grammar that makes the
// answer a call when the request requires one, and the answer parsed back into OpenAI's tool_calls.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.hpp"

namespace tokenhost::api {

struct Tool {
  std::string name, description;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // a JSON Schema, members as sent
};

struct ToolCall {
  std::string id;         // "call_" and 24 letters and digits
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

enum class ToolChoice { none, automatic, required, named };

struct ToolRequest {
  std::vector<Tool> tools;
  ToolChoice choice = ToolChoice::automatic;
  std::string name;                 // named: the function the answer must call
  bool parallel_tool_calls = true;  // required/named on Hermes templates: one call or more
  // Whether the model is told of the tools and its answer read for calls.
  bool active() const { return !tools.empty() && choice != ToolChoice::none; }
};

// `tools`: [{"type": "function", "function": {"name", "description", "parameters"}}]; names of letters,
// digits, '_' and '-' (1-64), distinct. An ordered_json keeps each schema's members in the client's order.
ApiResult<std::vector<Tool>> parse_tools(const nlohmann::ordered_json& v);
// `tool_choice`: "none", "auto", "required" or {"type": "function", "function": {"name"}}.
ApiResult<ToolRequest> parse_tool_choice(const nlohmann::json& v, ToolRequest r);

// How a chat template writes tool calls: Llama 3.1's (a JSON object {"name", "parameters"} as the whole
// answer; tools in the first user message; results as `ipython` messages), Hermes' as Qwen2.5 uses it
// (<tool_call>{"name", "arguments"}</tool_call> blocks; tools in the system message; results as
// <tool_response> blocks in a user message), or none known.
enum class ToolFormat { none, llama31, hermes };
std::string_view tool_format_name(ToolFormat f);

// The GBNF of an answer that calls the request's tool (named) or one of them (required), each call's
// arguments valid under its function's `parameters` (the JSON Schema subset of response_format).
// A 400 naming tools[i].function.parameters when a schema is outside it.
ApiResult<std::string> tool_call_grammar(const ToolRequest& r, ToolFormat format);

// The calls an answer makes and the text beside them (empty when the answer is only calls). Text that
// does not parse as a call stays content.
struct ToolAnswer {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolAnswer parse_tool_answer(const std::string& text, ToolFormat format, std::mt19937_64& rng);

}  // namespace tokenhost::api
