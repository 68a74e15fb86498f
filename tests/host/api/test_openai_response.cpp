// Response bodies, streaming chunks and SSE framing: the fields OpenAI clients read are present with
// the right types.
#include <catch2/catch.hpp>

#include "api/openai_response.hpp"
#include "harness.hpp"

namespace api_openai_response_tests {

using namespace tokenhost::api;
using namespace tokenhost::testing;
using nlohmann::json;

namespace {

ResponseMeta meta(Endpoint e) { return {e == Endpoint::completions ? "cmpl-abc" : "chatcmpl-abc", 1700000000, "stories"}; }

void require_envelope(const json& j, const char* object, const char* id) {
  REQUIRE(j["id"] == id);
  REQUIRE(j["object"] == object);
  REQUIRE(j["created"].is_number_integer());
  REQUIRE(j["created"] == 1700000000);
  REQUIRE(j["model"] == "stories");
  REQUIRE(j["choices"].is_array());
}

std::vector<TokenLogprobs> two_tokens() {
  return {{"Hel", -0.5, {{"Hel", -0.5}, {"Hi", -1.5}}}, {"lo", -0.25, {{"lo", -0.25}, {"p", -2.0}}}};
}

}  // namespace

TEST_CASE("response: ids are fresh and prefixed by endpoint", "[api][response]") {
  auto rng = fresh_rng("response ids");
  auto a = make_response_id(Endpoint::completions, rng);
  auto b = make_response_id(Endpoint::completions, rng);
  auto c = make_response_id(Endpoint::chat_completions, rng);
  REQUIRE(a.rfind("cmpl-", 0) == 0);
  REQUIRE(a.size() == 5 + 24);
  REQUIRE(c.rfind("chatcmpl-", 0) == 0);
  REQUIRE(a != b);
  auto m = make_response_meta(Endpoint::chat_completions, "stories", rng);
  REQUIRE(m.created > 1700000000);
  REQUIRE(m.model == "stories");
}

TEST_CASE("response: completions", "[api][response]") {
  std::vector<CompletionChoice> choices(2);
  choices[0].text = "Hello";
  choices[0].finish_reason = FinishReason::length;
  choices[0].has_logprobs = true;
  choices[0].logprobs = two_tokens();
  choices[1].text = "Bye";
  json j = completion_response(meta(Endpoint::completions), choices, {5, 2});
  require_envelope(j, "text_completion", "cmpl-abc");
  REQUIRE(j["choices"].size() == 2);
  const json& c0 = j["choices"][0];
  REQUIRE(c0["index"] == 0);
  REQUIRE(c0["text"] == "Hello");
  REQUIRE(c0["finish_reason"] == "length");
  REQUIRE(c0["logprobs"]["tokens"] == json::array({"Hel", "lo"}));
  REQUIRE(c0["logprobs"]["token_logprobs"] == json::array({-0.5, -0.25}));
  REQUIRE(c0["logprobs"]["top_logprobs"][0] == json{{"Hel", -0.5}, {"Hi", -1.5}});
  REQUIRE(c0["logprobs"]["text_offset"] == json::array({0, 3}));
  REQUIRE(j["choices"][1]["index"] == 1);
  REQUIRE(j["choices"][1]["finish_reason"] == "stop");
  REQUIRE(j["choices"][1]["logprobs"].is_null());
  REQUIRE(j["usage"] == json{{"prompt_tokens", 5}, {"completion_tokens", 2}, {"total_tokens", 7}});
}

TEST_CASE("response: chat completions", "[api][response]") {
  std::vector<CompletionChoice> choices(1);
  choices[0].text = "Hello";
  choices[0].has_logprobs = true;
  choices[0].logprobs = two_tokens();
  json j = chat_completion_response(meta(Endpoint::chat_completions), choices, {9, 2});
  require_envelope(j, "chat.completion", "chatcmpl-abc");
  const json& c = j["choices"][0];
  REQUIRE(c["index"] == 0);
  REQUIRE(c["message"] == json{{"role", "assistant"}, {"content", "Hello"}});
  REQUIRE(c["finish_reason"] == "stop");
  const json& lp = c["logprobs"]["content"];
  REQUIRE(lp.size() == 2);
  REQUIRE(lp[0]["token"] == "Hel");
  REQUIRE(lp[0]["logprob"] == -0.5);
  REQUIRE(lp[0]["bytes"] == json::array({72, 101, 108}));
  REQUIRE(lp[0]["top_logprobs"].size() == 2);
  REQUIRE(lp[0]["top_logprobs"][1] == json{{"token", "Hi"}, {"logprob", -1.5}, {"bytes", {72, 105}}});
  REQUIRE(j["usage"]["total_tokens"] == 11);
}

TEST_CASE("response: streaming chunks", "[api][response]") {
  auto cm = meta(Endpoint::completions);
  json piece = completion_chunk(cm, 1, "lo");
  require_envelope(piece, "text_completion", "cmpl-abc");
  REQUIRE(piece["choices"][0]["index"] == 1);
  REQUIRE(piece["choices"][0]["text"] == "lo");
  REQUIRE(piece["choices"][0]["finish_reason"].is_null());
  REQUIRE(piece["choices"][0]["logprobs"].is_null());
  auto lps = two_tokens();
  json with_lp = completion_chunk(cm, 0, "Hello", FinishReason::none, &lps, 10);
  REQUIRE(with_lp["choices"][0]["logprobs"]["text_offset"] == json::array({10, 13}));
  json last = completion_chunk(cm, 0, "", FinishReason::stop);
  REQUIRE(last["choices"][0]["finish_reason"] == "stop");

  auto hm = meta(Endpoint::chat_completions);
  json role = chat_role_chunk(hm, 0);
  require_envelope(role, "chat.completion.chunk", "chatcmpl-abc");
  REQUIRE(role["choices"][0]["delta"]["role"] == "assistant");
  REQUIRE(role["choices"][0]["finish_reason"].is_null());
  json content = chat_content_chunk(hm, 0, "Hel", &lps);
  REQUIRE(content["choices"][0]["delta"] == json{{"content", "Hel"}});
  REQUIRE(content["choices"][0]["logprobs"]["content"].size() == 2);
  REQUIRE(chat_content_chunk(hm, 0, "x")["choices"][0]["logprobs"].is_null());
  json fin = chat_finish_chunk(hm, 2, FinishReason::length);
  REQUIRE(fin["choices"][0]["index"] == 2);
  REQUIRE(fin["choices"][0]["delta"] == json::object());
  REQUIRE(fin["choices"][0]["finish_reason"] == "length");

  json usage = usage_chunk(hm, Endpoint::chat_completions, {3, 4});
  require_envelope(usage, "chat.completion.chunk", "chatcmpl-abc");
  REQUIRE(usage["choices"].empty());
  REQUIRE(usage["usage"]["total_tokens"] == 7);
  REQUIRE(usage_chunk(cm, Endpoint::completions, {3, 4})["object"] == "text_completion");

  // Without include_usage chunks have no usage field; with it, null until the usage chunk.
  REQUIRE_FALSE(content.contains("usage"));
  hm.include_usage = cm.include_usage = true;
  REQUIRE(chat_content_chunk(hm, 0, "x").at("usage").is_null());
  REQUIRE(chat_role_chunk(hm, 0).at("usage").is_null());
  REQUIRE(completion_chunk(cm, 0, "x").at("usage").is_null());
  REQUIRE(usage_chunk(hm, Endpoint::chat_completions, {3, 4})["usage"]["total_tokens"] == 7);
  REQUIRE_FALSE(chat_completion_response(hm, {}, {1, 1})["usage"].is_null());
}

TEST_CASE("response: SSE framing", "[api][response][sse]") {
  REQUIRE(sse_event(json{{"a", 1}}) == "data: {\"a\":1}\n\n");
  REQUIRE(sse_done() == "data: [DONE]\n\n");
  // A chunk round-trips through its event.
  json chunk = chat_content_chunk(meta(Endpoint::chat_completions), 0, "line1\nline2");
  std::string ev = sse_event(chunk);
  REQUIRE(ev.rfind("data: ", 0) == 0);
  REQUIRE(ev.substr(ev.size() - 2) == "\n\n");
  REQUIRE(ev.find('\n') == ev.size() - 2);  // newlines in text are escaped: one event, one line
  REQUIRE(json::parse(ev.substr(6)) == chunk);
  // Half a character in token text does not throw; it becomes U+FFFD.
  std::string half = "\xE2\x82";
  std::string out = sse_event(chat_content_chunk(meta(Endpoint::chat_completions), 0, half));
  REQUIRE(out.find("\xEF\xBF\xBD") != std::string::npos);
  REQUIRE(sse_event(invalid_request("n", "bad").to_json()).find("\"param\":\"n\"") != std::string::npos);
}

TEST_CASE("response: model list", "[api][response]") {
  json j = models_list({{"stories", 1700000000, "tokenhost"}, {"llama", 1, "me"}});
  REQUIRE(j["object"] == "list");
  REQUIRE(j["data"].size() == 2);
  REQUIRE(j["data"][0] == json{{"id", "stories"}, {"object", "model"}, {"created", 1700000000}, {"owned_by", "tokenhost"}});
  REQUIRE(j["data"][1]["owned_by"] == "me");
  REQUIRE(models_list({})["data"] == json::array());
  // A stated context goes out under llama-server's name and vLLM's.
  const json c = models_list({{"stories", 1, "tokenhost", 512}})["data"][0];
  REQUIRE(c["context_length"] == 512);
  REQUIRE(c["max_model_len"] == 512);
}

}  // namespace api_openai_response_tests
