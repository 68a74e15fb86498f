// Request parsing: typical bodies from OpenAI's documentation come through intact, and every bad field
// is refused with a 400 that names it.
#include <catch2/catch.hpp>

#include "api/openai_request.hpp"

namespace api_openai_request_tests {

using namespace tokenhost::api;
using nlohmann::json;

namespace {

const Endpoint kCmpl = Endpoint::completions;
const Endpoint kChat = Endpoint::chat_completions;

json chat_body(json extra = json::object()) {
  json b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  b.update(extra);
  return b;
}

json completion_body(json extra = json::object()) {
  json b = {{"model", "m"}, {"prompt", "Once upon a time"}};
  b.update(extra);
  return b;
}

// Refused with 400, `param` naming the field, and the message containing each of `words`.
void require_refused(Endpoint e, const json& body, const std::string& param, std::vector<std::string> words = {},
                     const RequestLimits& limits = {}) {
  INFO("body: " << body.dump() << "  expected param: " << param);
  auto r = parse_request(e, body, limits);
  REQUIRE_FALSE(r.ok());
  const ApiError& err = r.error();
  INFO("message: " << err.message);
  REQUIRE(err.http_status == 400);
  REQUIRE(err.type == "invalid_request_error");
  REQUIRE(err.param == param);
  for (const auto& w : words) REQUIRE(err.message.find(w) != std::string::npos);
}

}  // namespace

TEST_CASE("request: the chat example from OpenAI's documentation", "[api][request]") {
  json body = json::parse(R"({
    "model": "gpt-4o",
    "messages": [
      {"role": "developer", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hello!"},
      {"role": "assistant", "content": "Hi, how can I help?"},
      {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2+2?"}], "name": "ann"}
    ],
    "temperature": 0.7, "top_p": 0.9, "max_completion_tokens": 100, "n": 2, "stop": ["\n\n", "END"],
    "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3,
    "seed": 42, "user": "user-1234", "frequency_penalty": 0.5, "presence_penalty": -0.5,
    "logit_bias": {"50256": -100}, "tool_choice": "none", "parallel_tool_calls": false,
    "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "priority": 3, "tokenhost": {"arm": "a", "class": "batch"}
  })");
  auto r = parse_request(kChat, body);
  REQUIRE(r.ok());
  const auto& q = r.value();
  REQUIRE(q.endpoint == kChat);
  REQUIRE(q.model == "gpt-4o");
  REQUIRE(q.messages.size() == 4);
  REQUIRE(q.messages[0].role == "system");
  REQUIRE(q.messages[0].content == "You are a helpful assistant.");
  REQUIRE(q.messages[3].content == "What is\n2+2?");
  REQUIRE(q.messages[3].name == "ann");
  REQUIRE(q.temperature == Approx(0.7));
  REQUIRE(q.top_p == Approx(0.9));
  REQUIRE(q.max_tokens == 100);
  REQUIRE(q.n == 2);
  REQUIRE(q.stop == std::vector<std::string>{"\n\n", "END"});
  REQUIRE(q.stream);
  REQUIRE(q.include_usage);
  REQUIRE(q.logprobs);
  REQUIRE(q.top_logprobs == 3);
  REQUIRE(q.seed == 42);
  REQUIRE(q.user == "user-1234");
  REQUIRE(q.frequency_penalty == Approx(0.5));
  REQUIRE(q.presence_penalty == Approx(-0.5));
  REQUIRE(q.logit_bias.at(50256) == Approx(-100));
  REQUIRE(q.top_k == 40);
  REQUIRE(q.min_p == Approx(0.05));
  REQUIRE(q.repetition_penalty == Approx(1.1));
  REQUIRE(q.priority == 3);
  REQUIRE(q.arm == "a");
  REQUIRE(q.request_class == "batch");
  REQUIRE(q.ignored_fields.empty());  // tool_choice and parallel_tool_calls are read (tools)
  REQUIRE(q.tools.choice == ToolChoice::none);
  REQUIRE_FALSE(q.tools.parallel_tool_calls);

  auto p = sampling_params(q, 7);
  REQUIRE(p.temperature == Approx(0.7f));
  REQUIRE(p.top_k == 40);
  REQUIRE(p.seed == 42);
  REQUIRE(p.top_logprobs == 3);
  REQUIRE(sampling_params(parse_request(kChat, chat_body()).value(), 7).seed == 7);
}

TEST_CASE("request: the completions example from OpenAI's documentation", "[api][request]") {
  json body = json::parse(R"({"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test", "max_tokens": 7,
                              "temperature": 0, "logprobs": 2, "echo": false, "best_of": 1, "suffix": ""})");
  auto r = parse_request(kCmpl, body);
  REQUIRE(r.ok());
  REQUIRE(r->prompts.size() == 1);
  REQUIRE_FALSE(r->prompts[0].is_tokens);
  REQUIRE(r->prompts[0].text == "Say this is a test");
  REQUIRE(r->max_tokens == 7);
  REQUIRE(r->temperature == 0);
  REQUIRE(r->logprobs);
  REQUIRE(r->top_logprobs == 2);
  REQUIRE(r->ignored_fields == std::vector<std::string>{"best_of"});
  // Defaults: OpenAI's, and no max_tokens.
  auto d = parse_request(kCmpl, json{{"prompt", "x"}});
  REQUIRE(d.ok());
  REQUIRE(d->model.empty());
  REQUIRE_FALSE(d->max_tokens);
  REQUIRE(d->temperature == 1.0);
  REQUIRE(d->top_p == 1.0);
  REQUIRE(d->n == 1);
  REQUIRE_FALSE(d->stream);
  REQUIRE_FALSE(d->logprobs);
  REQUIRE(d->ignored_fields.empty());
}

TEST_CASE("request: prompt forms", "[api][request]") {
  auto one_tokens = parse_request(kCmpl, json{{"prompt", {1, 2, 3}}});
  REQUIRE(one_tokens.ok());
  REQUIRE(one_tokens->prompts.size() == 1);
  REQUIRE(one_tokens->prompts[0].is_tokens);
  REQUIRE(one_tokens->prompts[0].tokens == std::vector<int32_t>{1, 2, 3});

  auto batch = parse_request(kCmpl, json{{"prompt", json::array({"a", "b"})}});
  REQUIRE(batch.ok());
  REQUIRE(batch->prompts.size() == 2);
  REQUIRE(batch->prompts[1].text == "b");

  auto token_batch = parse_request(kCmpl, json::parse(R"({"prompt": [[1, 2], [3]]})"));
  REQUIRE(token_batch.ok());
  REQUIRE(token_batch->prompts.size() == 2);
  REQUIRE(token_batch->prompts[1].tokens == std::vector<int32_t>{3});

  REQUIRE(parse_request(kCmpl, json{{"prompt", ""}}).ok());  // empty text: generation from BOS
  require_refused(kCmpl, json{{"prompt", 5}}, "prompt", {"must be a string", "got number 5"});
  require_refused(kCmpl, json{{"prompt", json::array()}}, "prompt", {"empty"});
  require_refused(kCmpl, json::parse(R"({"prompt": ["a", 1]})"), "prompt[1]", {"string"});
  require_refused(kCmpl, json::parse(R"({"prompt": [1, "a"]})"), "prompt[1]", {"token id"});
  require_refused(kCmpl, json::parse(R"({"prompt": [1, -2]})"), "prompt[1]", {"-2"});
  require_refused(kCmpl, json::parse(R"({"prompt": [1, 2.5]})"), "prompt[1]", {"token id"});
  require_refused(kCmpl, json::parse(R"({"prompt": [[1], []]})"), "prompt[1]", {"empty"});
  require_refused(kCmpl, json::parse(R"({"prompt": [[1], [2, "x"]]})"), "prompt[1][1]", {"token id"});
  require_refused(kCmpl, json::parse(R"({"prompt": [{"a": 1}]})"), "prompt[0]");
  RequestLimits two;
  two.max_prompts = 2;
  require_refused(kCmpl, json{{"prompt", {"a", "b", "c"}}}, "prompt", {"3 prompts", "at most 2"}, two);
}

TEST_CASE("request: message forms and errors", "[api][request]") {
  auto tool = parse_request(kChat, json::parse(R"({"messages": [
      {"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "call_1"}]})"));
  REQUIRE(tool.ok());
  REQUIRE(tool->messages[1].content.empty());
  REQUIRE(tool->messages[2].tool_call_id == "call_1");

  auto refused = [](const char* messages, const std::string& param, std::vector<std::string> words = {}) {
    require_refused(kChat, json::parse(std::string(R"({"messages": )") + messages + "}"), param, words);
  };
  refused(R"("hi")", "messages", {"array", "got string \"hi\""});
  refused(R"([])", "messages", {"at least one"});
  refused(R"([{"role": "user", "content": "a"}, 3])", "messages[1]", {"object"});
  refused(R"([{"content": "a"}])", "messages[0].role", {"required"});
  refused(R"([{"role": 1, "content": "a"}])", "messages[0].role", {"string"});
  refused(R"([{"role": "robot", "content": "a"}])", "messages[0].role", {"robot"});
  refused(R"([{"role": "user"}])", "messages[0].content", {"required"});
  refused(R"([{"role": "user", "content": null}])", "messages[0].content", {"required"});
  refused(R"([{"role": "user", "content": 7}])", "messages[0].content", {"string", "got number 7"});
  refused(R"([{"role": "user", "content": "a"}, {"role": "user", "content": ["x"]}])", "messages[1].content[0]");
  refused(R"([{"role": "user", "content": [{"text": "x"}]}])", "messages[0].content[0].type");
  refused(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])", "messages[0].content[0].type",
          {"image_url"});
  refused(R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0].text");
  refused(R"([{"role": "user", "content": [{"type": "text", "text": 1}]}])", "messages[0].content[0].text");
  refused(R"([{"role": "user", "content": "a", "name": 5}])", "messages[0].name");
  refused(R"([{"role": "tool", "content": "a", "tool_call_id": 5}])", "messages[0].tool_call_id");
}

TEST_CASE("request: missing prompt or messages, and non-object bodies", "[api][request]") {
  require_refused(kCmpl, json{{"model", "m"}}, "prompt", {"required"});
  require_refused(kCmpl, json{{"prompt", nullptr}}, "prompt", {"required"});
  require_refused(kChat, json{{"model", "m"}}, "messages", {"required"});
  require_refused(kChat, json{{"prompt", "x"}}, "messages");  // prompt is not a chat field
  require_refused(kChat, json::array(), "", {"object", "array"});
  require_refused(kChat, json("x"), "", {"object"});
}

TEST_CASE("request: malformed JSON from the raw body", "[api][request]") {
  auto r = parse_request(kChat, std::string_view(R"({"messages": [)"));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().http_status == 400);
  REQUIRE(r.error().code == "invalid_json");
  REQUIRE(r.error().message.find("not valid JSON") != std::string::npos);
  REQUIRE(r.error().message.find("byte") != std::string::npos);
  REQUIRE_FALSE(parse_request(kChat, std::string_view("")).ok());
  auto ok = parse_request(kChat, std::string_view(R"({"messages": [{"role": "user", "content": "hi"}]})"));
  REQUIRE(ok.ok());
  REQUIRE(ok->messages[0].content == "hi");
}

TEST_CASE("request: wrong types name the field, what was expected and what came", "[api][request]") {
  struct Case {
    const char* field;
    json value;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"model", 3, "string"},          {"max_tokens", "10", "integer"},   {"max_tokens", 2.5, "integer"},
      {"temperature", "hot", "number"}, {"top_p", true, "number"},        {"top_k", 1.5, "integer"},
      {"min_p", json::array(), "number"}, {"repetition_penalty", "x", "number"},
      {"frequency_penalty", "x", "number"}, {"presence_penalty", json::object(), "number"},
      {"seed", "42", "integer"},       {"n", "2", "integer"},            {"stop", 3, "string"},
      {"stream", "true", "boolean"},   {"stream_options", true, "object"}, {"user", 1, "string"},
      {"priority", "high", "integer"}, {"tokenhost", "x", "object"},     {"logit_bias", json::array(), "object"},
  };
  for (const auto& c : cases) {
    require_refused(kChat, chat_body({{c.field, c.value}}), c.field, {c.field, c.expected, "got"});
    require_refused(kCmpl, completion_body({{c.field, c.value}}), c.field, {c.field, c.expected, "got"});
  }
  require_refused(kChat, chat_body({{"logprobs", 1}}), "logprobs", {"boolean"});
  require_refused(kChat, chat_body({{"top_logprobs", "2"}}), "top_logprobs", {"integer"});
  require_refused(kChat, chat_body({{"max_completion_tokens", "2"}}), "max_completion_tokens", {"integer"});
  require_refused(kCmpl, completion_body({{"logprobs", true}}), "logprobs", {"integer"});
  require_refused(kCmpl, completion_body({{"echo", 1}}), "echo", {"boolean"});
  require_refused(kChat, chat_body({{"stream", true}, {"stream_options", {{"include_usage", 1}}}}),
                  "stream_options.include_usage", {"boolean"});
  require_refused(kChat, chat_body({{"stop", json::array({"a", 1})}}), "stop[1]", {"string"});
  // An integral float is an integer; 2^63 is not a 64-bit integer.
  REQUIRE(parse_request(kChat, chat_body({{"max_tokens", 5.0}})).value().max_tokens == 5);
  require_refused(kChat, chat_body({{"seed", uint64_t(1) << 63}}), "seed", {"64 bits"});
}

TEST_CASE("request: out-of-range values name the field and the range", "[api][request]") {
  struct Case {
    const char* field;
    json value;
  };
  const std::vector<Case> cases = {
      {"max_tokens", 0},        {"max_tokens", -5},        {"temperature", -0.1}, {"temperature", 2.5},
      {"top_p", 0},             {"top_p", 1.01},           {"top_k", -1},         {"min_p", -0.1},
      {"min_p", 1},             {"repetition_penalty", 0}, {"repetition_penalty", -1},
      {"frequency_penalty", 2.1}, {"frequency_penalty", -3}, {"presence_penalty", 2.5}, {"n", 0},
      {"n", 17},                {"logit_bias", {{"12", 101}}}, {"logit_bias", {{"x", 1}}}, {"logit_bias", {{"-1", 1}}},
  };
  for (const auto& c : cases) {
    std::string param = c.field;
    if (param == "logit_bias") param += "." + c.value.begin().key();
    require_refused(kChat, chat_body({{c.field, c.value}}), param);
    require_refused(kCmpl, completion_body({{c.field, c.value}}), param);
  }
  require_refused(kChat, chat_body({{"temperature", 3}}), "temperature", {"[0, 2]", "got 3"});
  require_refused(kChat, chat_body({{"n", 20}}), "n", {"from 1 to 16", "got 20"});
  require_refused(kChat, chat_body({{"max_tokens", 0}}), "max_tokens", {"at least 1", "got 0"});
  require_refused(kChat, chat_body({{"top_logprobs", 21}}), "top_logprobs", {"0 to 20", "21"});
  require_refused(kChat, chat_body({{"top_logprobs", -1}}), "top_logprobs");
  require_refused(kCmpl, completion_body({{"logprobs", 21}}), "logprobs", {"0 to 20"});
  require_refused(kCmpl, completion_body({{"logprobs", -1}}), "logprobs");
  // Limits from the deployment.
  RequestLimits ctx;
  ctx.max_tokens_limit = 4096;
  REQUIRE(parse_request(kChat, chat_body({{"max_tokens", 4096}}), ctx).ok());
  require_refused(kChat, chat_body({{"max_tokens", 4097}}), "max_tokens", {"4097", "4096"}, ctx);
  require_refused(kChat, chat_body({{"max_completion_tokens", 100000}}), "max_completion_tokens", {"4096"}, ctx);
  require_refused(kChat, chat_body({{"stop", {"a", "b", "c", "d", "e"}}}), "stop", {"5", "at most 4"});
  require_refused(kChat, chat_body({{"stop", ""}}), "stop", {"empty"});
  require_refused(kChat, chat_body({{"stop", json::array({"a", ""})}}), "stop[1]", {"empty"});
}

TEST_CASE("request: combinations that do not go together", "[api][request]") {
  require_refused(kChat, chat_body({{"stream_options", {{"include_usage", true}}}}), "stream_options", {"stream"});
  require_refused(kChat, chat_body({{"top_logprobs", 2}}), "top_logprobs", {"logprobs"});
  require_refused(kChat, chat_body({{"max_tokens", 10}, {"max_completion_tokens", 20}}), "max_completion_tokens");
  REQUIRE(parse_request(kChat, chat_body({{"max_tokens", 10}, {"max_completion_tokens", 10}})).ok());
  // Echo with logprobs scores the prompt, answered whole: a stream of it is refused.
  REQUIRE(parse_request(kCmpl, completion_body({{"echo", true}, {"logprobs", 1}})).ok());
  require_refused(kCmpl, completion_body({{"echo", true}, {"logprobs", 1}, {"stream", true}}), "echo", {"stream", "not supported"});
  // max_tokens 0 scores the prompt: completions with echo only.
  REQUIRE(parse_request(kCmpl, completion_body({{"echo", true}, {"max_tokens", 0}})).value().max_tokens == 0);
  require_refused(kCmpl, completion_body({{"max_tokens", 0}}), "max_tokens", {"echo"});
  require_refused(kChat, chat_body({{"max_tokens", 0}}), "max_tokens", {"at least 1"});
  require_refused(kCmpl, completion_body({{"max_tokens", -1}}), "max_tokens", {"at least 0"});
  REQUIRE(parse_request(kCmpl, completion_body({{"echo", true}})).value().echo);
  require_refused(kCmpl, completion_body({{"suffix", "end"}}), "suffix", {"not supported"});
  require_refused(kChat, chat_body({{"tools", {{{"type", "function"}}}}}), "tools[0].function", {"must be an object"});
  REQUIRE(parse_request(kChat, chat_body({{"tools", json::array()}})).ok());
  REQUIRE(parse_request(kChat, chat_body({{"response_format", {{"type", "text"}}}})).value().constraint == nullptr);
  // Structured output: a JSON object, a schema of the subset (compiled to GBNF), a grammar; one of them.
  const auto object = parse_request(kChat, chat_body({{"response_format", {{"type", "json_object"}}}}));
  REQUIRE(object.value().constraint->type == "json_object");
  REQUIRE(object.value().constraint->gbnf.find("root ::=") != std::string::npos);
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  const auto typed = parse_request(kCmpl, completion_body({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}, {"strict", true}}}}}}));
  REQUIRE(typed.value().constraint->type == "json_schema");
  REQUIRE(json::parse(typed.value().constraint->text) == schema);
  require_refused(kChat, chat_body({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "x"}}}}}}}}),
                  "response_format.json_schema.schema", {"pattern"});
  require_refused(kChat, chat_body({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}}}}}}),
                  "response_format.json_schema.schema", {"required"});
  require_refused(kChat, chat_body({{"response_format", {{"type", "xml"}}}}), "response_format.type", {"json_object"});
  require_refused(kChat, chat_body({{"response_format", "json"}}), "response_format", {"an object"});
  const auto grammar = parse_request(kCmpl, completion_body({{"tokenhost", {{"grammar", "root ::= \"a\"+"}}}}));
  REQUIRE(grammar.value().constraint->type == "gbnf");
  require_refused(kCmpl, completion_body({{"tokenhost", {{"grammar", "root ::= (\"a\""}}}}), "tokenhost.grammar", {"grammar:1:"});
  require_refused(kCmpl, completion_body({{"tokenhost", {{"grammar", 3}}}}), "tokenhost.grammar", {"a string"});
  require_refused(kCmpl, completion_body({{"tokenhost", {{"grammar", "root ::= \"a\""}}}, {"response_format", {{"type", "json_object"}}}}),
                  "tokenhost.grammar", {"give one"});
  // null is absent.
  auto r = parse_request(kChat, chat_body({{"temperature", nullptr}, {"stop", nullptr}, {"max_tokens", nullptr}}));
  REQUIRE(r.ok());
  REQUIRE(r->temperature == 1.0);
  REQUIRE_FALSE(r->max_tokens);
}

TEST_CASE("request: the error body has OpenAI's shape", "[api][request]") {
  auto r = parse_request(kChat, chat_body({{"temperature", 9}}));
  REQUIRE_FALSE(r.ok());
  json j = r.error().to_json();
  REQUIRE(j.size() == 1);
  REQUIRE(j["error"]["message"].is_string());
  REQUIRE(j["error"]["type"] == "invalid_request_error");
  REQUIRE(j["error"]["param"] == "temperature");
  REQUIRE(j["error"]["code"].is_null());
  REQUIRE(invalid_request("", "x").to_json()["error"]["param"].is_null());
}

TEST_CASE("request: the context check once the prompt is tokenized", "[api][request]") {
  auto fits = check_context(100, 50, 4096);
  REQUIRE(fits.ok());
  REQUIRE(fits.value() == 50);
  REQUIRE(check_context(100, std::nullopt, 4096).value() == 3996);
  REQUIRE(check_context(4000, 96, 4096).value() == 96);

  auto full = check_context(5000, std::nullopt, 4096, "messages");
  REQUIRE_FALSE(full.ok());
  REQUIRE(full.error().param == "messages");
  REQUIRE(full.error().code == "context_length_exceeded");
  REQUIRE(full.error().message.find("prompt has 5000 tokens, model context is 4096") != std::string::npos);
  REQUIRE_FALSE(check_context(4096, std::nullopt, 4096).ok());

  auto too_long = check_context(4000, 100, 4096);
  REQUIRE_FALSE(too_long.ok());
  REQUIRE(too_long.error().param == "max_tokens");
  REQUIRE(too_long.error().message.find("4000") != std::string::npos);
  REQUIRE(too_long.error().message.find("100") != std::string::npos);
}

TEST_CASE("openai request: prompts x n is capped per request (one request cannot fill the KV cache alone)", "[api]") {
  const json four = json::array({"a", "b", "c", "d"});
  auto ok = parse_request(kCmpl, completion_body({{"prompt", four}, {"n", 4}}));
  REQUIRE(ok.ok());
  REQUIRE(ok.value().prompts.size() * size_t(ok.value().n) == 16);
  require_refused(kCmpl, completion_body({{"prompt", four}, {"n", 5}}), "n",
                  {"4 prompt(s) x n = 5, 20 sequences", "at most 16"});
  RequestLimits tight;
  tight.max_sequences = 3;
  require_refused(kCmpl, completion_body({{"n", 4}}), "n", {"1 prompt(s) x n = 4, 4 sequences", "at most 3"}, tight);
  require_refused(kChat, chat_body({{"n", 4}}), "n", {"at most 3"}, tight);
  REQUIRE(parse_request(kChat, chat_body({{"n", 3}}), tight).ok());
}

TEST_CASE("request: tokenhost.speculate and tokenhost.max_draft bound a request's speculative decoding", "[api][request]") {
  REQUIRE_FALSE(parse_request(kChat, chat_body({{"tokenhost", {{"arm", "a"}}}})).value().max_draft.has_value());
  REQUIRE(parse_request(kChat, chat_body({{"tokenhost", {{"speculate", false}}}})).value().max_draft == 0u);
  REQUIRE_FALSE(parse_request(kChat, chat_body({{"tokenhost", {{"speculate", true}}}})).value().max_draft.has_value());
  REQUIRE(parse_request(kCmpl, completion_body({{"tokenhost", {{"max_draft", 3}}}})).value().max_draft == 3u);
  REQUIRE(parse_request(kChat, chat_body({{"tokenhost", {{"max_draft", 0}}}})).value().max_draft == 0u);
  REQUIRE(parse_request(kChat, chat_body({{"tokenhost", {{"speculate", true}, {"max_draft", 2}}}})).value().max_draft == 2u);
  require_refused(kChat, chat_body({{"tokenhost", {{"speculate", "no"}}}}), "tokenhost.speculate", {"boolean"});
  require_refused(kChat, chat_body({{"tokenhost", {{"max_draft", 17}}}}), "tokenhost.max_draft", {"from 0 to 16", "got 17"});
  require_refused(kChat, chat_body({{"tokenhost", {{"max_draft", -1}}}}), "tokenhost.max_draft", {"from 0 to 16"});
  require_refused(kChat, chat_body({{"tokenhost", {{"max_draft", 1.5}}}}), "tokenhost.max_draft", {"integer"});
  require_refused(kChat, chat_body({{"tokenhost", {{"speculate", false}, {"max_draft", 2}}}}), "tokenhost.max_draft",
                  {"'tokenhost.speculate' is false"});
  require_refused(kChat, chat_body({{"tokenhost", {{"draft", 2}}}}), "tokenhost.draft", {"'speculate', 'max_draft' and 'grammar'"});
}

}  // namespace api_openai_request_tests
