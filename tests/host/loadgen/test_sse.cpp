// The SSE parser on a recorded /v1/completions stream cut at fresh random points (and with "\r\n"
// line ends, a "\r\n" cut between its two bytes included): the events and what they carry are the
// same as from the whole stream at once. And the reading of chunks, error objects and bad data.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "loadgen/openai.hpp"
#include "loadgen/sse.hpp"

namespace loadgen_sse_tests {

using namespace tokenhost::loadgen;
using tokenhost::testing::fresh_rng;

namespace {

// A stream as vLLM sends it for a streamed completion with stream_options.include_usage, with a
// keep-alive comment and an event: line added.
const std::string kRecorded =
    ": keep-alive\n\n"
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" The\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" river\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "event: message\n"
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" runs\\n\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "data:{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" north\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"total_tokens\":16,\"completion_tokens\":4}}\n\n"
    "data: [DONE]\n\n";

std::vector<std::string> parse_in_pieces(const std::string& stream, const std::vector<size_t>& cuts) {
  std::vector<std::string> events;
  SseParser parser([&](const std::string& d) { events.push_back(d); });
  size_t at = 0;
  for (size_t cut : cuts) {
    parser.feed(std::string_view(stream).substr(at, cut - at));
    at = cut;
  }
  parser.feed(std::string_view(stream).substr(at));
  parser.finish();
  return events;
}

std::string crlf(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

}  // namespace

TEST_CASE("loadgen: SSE parsing does not depend on where the stream is cut", "[loadgen]") {
  auto rng = fresh_rng("loadgen sse splits");
  const auto whole = parse_in_pieces(kRecorded, {});
  REQUIRE(whole.size() == 7);
  CHECK(whole.back() == "[DONE]");

  std::string text;
  std::optional<uint64_t> completion, prompt;
  int text_chunks = 0, finished = 0, done = 0;
  for (const auto& e : whole) {
    Chunk c = parse_chunk(e);
    text += c.text;
    text_chunks += !c.text.empty();
    finished += c.finished;
    done += c.done;
    if (c.completion_tokens) completion = c.completion_tokens;
    if (c.prompt_tokens) prompt = c.prompt_tokens;
  }
  CHECK(text == " The river runs\n north");
  CHECK(text_chunks == 4);
  CHECK(finished == 1);
  CHECK(done == 1);
  CHECK(completion == 4u);
  CHECK(prompt == 12u);

  for (const std::string& stream : {kRecorded, crlf(kRecorded)}) {
    for (int round = 0; round < 300; ++round) {
      std::set<size_t> cut_set;
      const size_t n_cuts = std::uniform_int_distribution<size_t>(1, round < 50 ? stream.size() - 1 : 20)(rng);
      while (cut_set.size() < n_cuts) cut_set.insert(std::uniform_int_distribution<size_t>(1, stream.size() - 1)(rng));
      std::vector<size_t> cuts(cut_set.begin(), cut_set.end());
      INFO("round " << round << ", " << cuts.size() << " cuts");
      REQUIRE(parse_in_pieces(stream, cuts) == whole);
    }
    // Every "\r\n" cut between its bytes.
    std::vector<size_t> cuts;
    for (size_t i = 1; i < stream.size(); ++i)
      if (stream[i] == '\n' && stream[i - 1] == '\r') cuts.push_back(i);
    CHECK(parse_in_pieces(stream, cuts) == whole);
  }
}

TEST_CASE("loadgen: SSE fields, multi-line data, bare CR line ends and an unterminated last event", "[loadgen]") {
  auto events = parse_in_pieces("id: 7\nretry: 10\ndata: a\ndata:  b\n\n:comment\n\ndata\n\nevent: x\n\ndata: c\rdata: d\r\rdata: e", {});
  REQUIRE(events.size() == 4);
  CHECK(events[0] == "a\n b");
  CHECK(events[1] == "");
  CHECK(events[2] == "c\nd");
  CHECK(events[3] == "e");
}

TEST_CASE("loadgen: chunk reading: chat deltas, errors, malformed data", "[loadgen]") {
  Chunk chat = parse_chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]})");
  CHECK(chat.text == "Hi");
  CHECK_FALSE(chat.finished);
  Chunk whole = parse_chunk(R"({"choices":[{"message":{"content":"all of it"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5}})");
  CHECK(whole.text == "all of it");
  CHECK(whole.finished);
  CHECK(whole.completion_tokens == 5u);
  Chunk err = parse_chunk(R"({"error":{"message":"out of memory","type":"server_error"}})");
  REQUIRE(err.error);
  CHECK(*err.error == "out of memory");
  CHECK_THROWS_WITH(parse_chunk("{\"choices\": [}"), Catch::StartsWith("not JSON: {\"choices\""));
  CHECK_THROWS_WITH(parse_chunk("[1, 2]"), Catch::StartsWith("not a JSON object"));
  CHECK_THROWS_WITH(parse_chunk(R"({"choices": 3})"), Catch::StartsWith("'choices' is not an array"));
  CHECK(error_message(R"({"error":{"message":"bad max_tokens","code":400}})") == "bad max_tokens");
  CHECK(error_message(R"({"error":"plain"})") == "plain");
  CHECK(error_message(R"({"message":"top level"})") == "top level");
  CHECK(error_message("  Not Found\n") == "Not Found");
}

TEST_CASE("loadgen: request bodies", "[loadgen]") {
  auto j = nlohmann::json::parse(request_body({false, "m", true, false, ""}, "hello", 16));
  CHECK(j == nlohmann::json::parse(R"({"model":"m","prompt":"hello","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}})"));
  j = nlohmann::json::parse(request_body({true, "", false, true, ""}, "hi", 4));
  CHECK(j == nlohmann::json::parse(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":false,"ignore_eos":true})"));
  // --extra-body: its members added, replacing those of the same name.
  j = nlohmann::json::parse(request_body({false, "m", false, false, R"({"temperature": 0, "max_tokens": 9, "tokenhost": {"max_draft": 2}})"}, "x", 4));
  CHECK(j == nlohmann::json::parse(R"({"model":"m","prompt":"x","max_tokens":9,"stream":false,"temperature":0,"tokenhost":{"max_draft":2}})"));
  // A conversation's later turn: earlier turns as messages, or each prompt and its answer then a newline.
  const std::vector<std::string> history = {"Hi there.", " Hello!", "How are you?", " Fine."};
  j = nlohmann::json::parse(request_body({true, "", false, false, ""}, "Bye.", 4, history));
  CHECK(j["messages"] == nlohmann::json::parse(R"([{"role":"user","content":"Hi there."},{"role":"assistant","content":" Hello!"},
    {"role":"user","content":"How are you?"},{"role":"assistant","content":" Fine."},{"role":"user","content":"Bye."}])"));
  j = nlohmann::json::parse(request_body({false, "", false, false, ""}, "Bye.", 4, history));
  CHECK(j["prompt"] == "Hi there. Hello!\nHow are you? Fine.\nBye.");
  CHECK_NOTHROW(parse_extra_body(""));
  CHECK_THROWS_WITH(parse_extra_body("{\"temperature\": "), Catch::StartsWith("--extra-body is not JSON"));
  CHECK_THROWS_WITH(parse_extra_body("[1]"), Catch::StartsWith("--extra-body must be a JSON object"));
}

}  // namespace loadgen_sse_tests
