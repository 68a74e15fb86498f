// Tool calling (api/tools.hpp, chat_template.hpp): requests' tools and tool_choice, the two tool formats
// rendered as their templates write them, the grammar of a required call (checked with the SDK's GBNF
// matcher), and answers read back into calls.
#include <catch2/catch.hpp>

#include <tokenhost/gbnf.hpp>

#include "api/chat_template.hpp"
#include "api/tools.hpp"

namespace api_tools_tests {

using namespace tokenhost::api;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
])");

bool whole(const std::string& gbnf, const std::string& text) {
  tokenhost::sdk::GrammarMatcher m(std::make_shared<const tokenhost::sdk::Grammar>(tokenhost::sdk::parse_gbnf(gbnf)));
  return m.accept(text) && m.complete();
}

}  // namespace

TEST_CASE("tools: tools and tool_choice are read and checked", "[api][tools]") {
  auto tools = parse_tools(kTools);
  REQUIRE(tools.ok());
  REQUIRE(tools->size() == 2);
  CHECK(tools->at(0).parameters.begin().key() == "type");  // the client's order
  ToolRequest r;
  r.tools = tools.value();
  CHECK(parse_tool_choice("required", r)->choice == ToolChoice::required);
  CHECK(parse_tool_choice("none", r)->choice == ToolChoice::none);
  auto named = parse_tool_choice(json{{"type", "function"}, {"function", {{"name", "add"}}}}, r);
  CHECK(named->choice == ToolChoice::named);
  CHECK(named->name == "add");
  CHECK(parse_tool_choice(json{{"type", "function"}, {"function", {{"name", "nope"}}}}, r).error().message.find("does not list") != std::string::npos);
  CHECK(parse_tool_choice("sometimes", r).error().param == "tool_choice");
  CHECK(parse_tool_choice("required", ToolRequest{}).error().message.find("lists no function") != std::string::npos);
  CHECK(parse_tools(ordered_json::parse(R"([{"type": "function", "function": {"name": "a b"}}])")).error().param == "tools[0].function.name");
  CHECK(parse_tools(ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])"))
            .error().message.find("two tools") != std::string::npos);
  CHECK(parse_tools(ordered_json::parse(R"([{"type": "retrieval"}])")).error().param == "tools[0].type");
}

TEST_CASE("tools: Llama 3.1's format: the functions in the first user message, calls as JSON, results as ipython", "[api][tools]") {
  const std::vector<Tool> tools = parse_tools(kTools).value();
  std::vector<ChatMessage> m = {{"system", "Be brief.", "", "", {}}, {"user", "Weather?", "", "", {}},
                                {"assistant", "", "", "", {{"call_1", "get_weather", R"({"city":"Paris","days":1})"}}},
                                {"tool", "{\"t\": 20}", "", "call_1", {}}};
  ChatRenderOptions o;
  o.tools = &tools;
  o.tool_format = ToolFormat::llama31;
  const auto r = render_chat(m, ChatTemplateFamily::llama3, o);
  REQUIRE(r.ok());
  const std::string& t = r->text;
  const size_t user = t.find("<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions");
  REQUIRE(user != std::string::npos);
  CHECK(t.find("\"name\": \"get_weather\"", user) != std::string::npos);
  CHECK(t.find("Weather?<|eot_id|>", user) != std::string::npos);
  CHECK(t.find("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\",\"days\":1}}<|eot_id|>") !=
        std::string::npos);
  CHECK(t.find("<|start_header_id|>ipython<|end_header_id|>\n\n{\"t\": 20}<|eot_id|>") != std::string::npos);
  CHECK(detect_tool_format("{{ '<|start_header_id|>' }} ... ipython") == ToolFormat::llama31);
  CHECK(detect_tool_format("{{ '<|start_header_id|>' }}") == ToolFormat::none);
}

TEST_CASE("tools: Hermes' format: the functions in the system message, calls in tags, results grouped", "[api][tools]") {
  const std::vector<Tool> tools = parse_tools(kTools).value();
  std::vector<ChatMessage> m = {{"user", "Weather?", "", "", {}},
                                {"assistant", "", "", "", {{"c1", "get_weather", R"({"city":"Oslo","days":2})"}, {"c2", "add", R"({"a":1})"}}},
                                {"tool", "sunny", "", "c1", {}}, {"tool", "1", "", "c2", {}}};
  ChatRenderOptions o;
  o.tools = &tools;
  o.tool_format = ToolFormat::hermes;
  const auto r = render_chat(m, ChatTemplateFamily::chatml, o);
  REQUIRE(r.ok());
  const std::string& t = r->text;
  CHECK(t.rfind("<|im_start|>system\n\n\n# Tools\n\n", 0) == 0);
  CHECK(t.find("<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"") != std::string::npos);
  CHECK(t.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":2}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\":1}}\n</tool_call><|im_end|>") != std::string::npos);
  CHECK(t.find("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n1\n</tool_response><|im_end|>") != std::string::npos);
  CHECK(detect_tool_format("<|im_start|> <tool_call>") == ToolFormat::hermes);
}

TEST_CASE("tools: a required call's grammar takes exactly the calls of the listed functions", "[api][tools]") {
  ToolRequest r;
  r.tools = parse_tools(kTools).value();
  r.choice = ToolChoice::required;
  const std::string llama = tool_call_grammar(r, ToolFormat::llama31).value();
  CHECK(whole(llama, R"({"name": "add", "parameters": {"a": 3}})"));
  CHECK(whole(llama, R"({"name": "get_weather", "parameters": {"city": "x", "days": 2}})"));
  CHECK_FALSE(whole(llama, R"({"name": "add", "parameters": {"city": "x"}})"));
  CHECK_FALSE(whole(llama, R"({"name": "sub", "parameters": {"a": 3}})"));
  r.parallel_tool_calls = true;
  const std::string hermes = tool_call_grammar(r, ToolFormat::hermes).value();
  CHECK(whole(hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>"));
  CHECK(whole(hermes, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 4}}\n</tool_call>"));
  CHECK_FALSE(whole(hermes, "{\"name\": \"add\", \"arguments\": {\"a\": 3}}"));
  r.choice = ToolChoice::named;
  r.name = "add";
  r.parallel_tool_calls = false;
  const std::string named = tool_call_grammar(r, ToolFormat::hermes).value();
  CHECK_FALSE(whole(named, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\", \"days\": 2}}\n</tool_call>"));
  CHECK_FALSE(whole(named, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 4}}\n</tool_call>"));
  r.tools[1].parameters = ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}})");
  CHECK(tool_call_grammar(r, ToolFormat::hermes).error().param == "tools[1].function.parameters/properties/a");
}

TEST_CASE("tools: answers read back into calls, and text that is no call stays content", "[api][tools]") {
  std::mt19937_64 rng(1);
  auto a = parse_tool_answer(" {\"name\": \"add\", \"parameters\": {\"a\": 3}} ", ToolFormat::llama31, rng);
  REQUIRE(a.calls.size() == 1);
  CHECK(a.calls[0].name == "add");
  CHECK(json::parse(a.calls[0].arguments) == json{{"a", 3}});
  CHECK(a.content.empty());
  CHECK(parse_tool_answer("It is sunny.", ToolFormat::llama31, rng).calls.empty());
  CHECK(parse_tool_answer("{\"name\": \"add\"} and more", ToolFormat::llama31, rng).content == "{\"name\": \"add\"} and more");
  auto h = parse_tool_answer("Let me see.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n"
                             "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>",
                             ToolFormat::hermes, rng);
  REQUIRE(h.calls.size() == 2);
  CHECK(h.calls[1].name == "get_weather");
  CHECK(h.content == "Let me see.");
  CHECK(h.calls[0].id != h.calls[1].id);
  auto cut = parse_tool_answer("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"na", ToolFormat::hermes, rng);
  CHECK(cut.calls.size() == 1);
  CHECK(cut.content == "<tool_call>\n{\"na");
}

}  // namespace api_tools_tests
