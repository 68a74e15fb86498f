// POST /tokenize and /detokenize against stories260K's own tokenizer: the ids are the model's, the
// round trip gives the text back, and bad input is a 400 naming the field; logit_bias on the served model.
#include <catch2/catch.hpp>

#include "model/tokenizer.hpp"
#include "openai_client.hpp"

namespace server_tokenize_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using nlohmann::json;
using Catch::Matchers::Contains;

TEST_CASE("tokenize: the served model's ids, pieces on request, and back to the same text", "[openai][tokenize]") {
  LiveServer s(stories_manifest());
  const ServedModel& model = *s.server->gateway().find_model("");
  for (const std::string text : {"Once upon a time, there was a little girl.", "Lily saw a big dog", "x"}) {
    INFO(text);
    auto a = post(s, "/tokenize", json{{"content", text}}.dump());
    REQUIRE(a.status == 200);
    std::vector<int32_t> ids = a.body["tokens"].get<std::vector<int32_t>>();
    REQUIRE(ids == model.encode(text, false, true));
    REQUIRE_FALSE(ids.empty());
    auto with_bos = post(s, "/tokenize", json{{"content", text}, {"add_special", true}}.dump());
    REQUIRE(with_bos.body["tokens"][0] == model.tokenizer->bos());
    REQUIRE(with_bos.body["tokens"].size() == ids.size() + 1);
    auto pieces = post(s, "/tokenize", json{{"content", text}, {"with_pieces", true}}.dump());
    std::string joined;
    for (size_t i = 0; i < ids.size(); ++i) {
      REQUIRE(pieces.body["tokens"][i]["id"] == ids[i]);
      joined += pieces.body["tokens"][i]["piece"].get<std::string>();
    }
    auto back = post(s, "/detokenize", json{{"tokens", ids}}.dump());
    REQUIRE(back.status == 200);
    REQUIRE(back.body["content"] == joined);
    // SentencePiece marks the leading space; the text comes back with it.
    REQUIRE_THAT(back.body["content"].get<std::string>(), Contains(text.substr(1)));
  }
}

TEST_CASE("tokenize: bad input is a 400 naming the field, an unknown model a 404", "[openai][tokenize]") {
  LiveServer s(stories_manifest());
  const uint32_t vocab = s.server->gateway().find_model("")->vocab_size;
  struct Case {
    const char* path;
    json body;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/tokenize", json::object(), 400, "'content'"},
      {"/tokenize", json{{"content", 5}}, 400, "'content'"},
      {"/tokenize", json{{"content", "a"}, {"add_special", "yes"}}, 400, "'add_special' must be a boolean"},
      {"/tokenize", json{{"content", "a"}, {"model", "nope"}}, 404, "model 'nope' does not exist"},
      {"/detokenize", json{{"tokens", "1 2"}}, 400, "'tokens'"},
      {"/detokenize", json{{"tokens", {1, int64_t(vocab)}}}, 400, "'tokens[1]' is not a token id of model stories"},
      {"/detokenize", json{{"tokens", {-1}}}, 400, "'tokens[0]'"},
  };
  for (const auto& c : cases) {
    INFO(c.path << " " << c.body.dump());
    auto a = post(s, c.path, c.body.dump());
    REQUIRE(a.status == c.status);
    REQUIRE_THAT(a.body["error"]["message"].get<std::string>(), Contains(c.message));
  }
}

TEST_CASE("openai: logit_bias steers the served model, and a token outside the vocabulary is refused", "[openai]") {
  LiveServer s(stories_manifest());
  const uint32_t vocab = s.server->gateway().find_model("")->vocab_size;
  auto plain = post(s, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0},
                                                {"ignore_eos", true}, {"logprobs", 1}}.dump());
  REQUIRE(plain.status == 200);
  // +100 on one token: greedy decoding emits nothing else.
  const int32_t forced = 100;
  const std::string piece = s.server->gateway().find_model("")->piece(forced);
  auto biased = post(s, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0},
                                                 {"ignore_eos", true}, {"logit_bias", {{std::to_string(forced), 100}}}}.dump());
  REQUIRE(biased.status == 200);
  std::string expected;
  for (int i = 0; i < 6; ++i) expected += piece;
  REQUIRE(biased.body["choices"][0]["text"] == expected);
  REQUIRE(biased.body["choices"][0]["text"] != plain.body["choices"][0]["text"]);
  auto outside = post(s, "/v1/completions", json{{"prompt", "Once"}, {"logit_bias", {{std::to_string(vocab), 1}}}}.dump());
  REQUIRE(outside.status == 400);
  REQUIRE(outside.body["error"]["param"] == "logit_bias." + std::to_string(vocab));
}

}  // namespace server_tokenize_tests
