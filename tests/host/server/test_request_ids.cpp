// Every gateway request has an id: the client's X-Request-Id when usable, else one the gateway makes.
// It comes back as X-Request-Id on every answer (whole, streamed, refused) and names the request in
// the log lines about it.
#include <catch2/catch.hpp>

#include <regex>

#include "captured_log.hpp"
#include "eventually.hpp"
#include "openai_client.hpp"

namespace server_request_ids_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using nlohmann::json;

namespace {

const std::regex kMadeId("req-[0-9a-f]{24}");

}  // namespace

TEST_CASE("request ids: the client's X-Request-Id comes back, else the gateway makes one per request", "[request_id]") {
  LiveServer s(stories_manifest());
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};

  auto given = post(s, "/v1/completions", body.dump(), {{"X-Request-Id", "client-trace_42:a/b+c=d.e"}});
  REQUIRE(given.status == 200);
  CHECK(given.headers["x-request-id"] == "client-trace_42:a/b+c=d.e");

  auto a = post(s, "/v1/completions", body.dump());
  auto b = post(s, "/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}}.dump());
  REQUIRE(a.status == 200);
  REQUIRE(b.status == 200);
  CHECK(std::regex_match(a.headers["x-request-id"], kMadeId));
  CHECK(std::regex_match(b.headers["x-request-id"], kMadeId));
  CHECK(a.headers["x-request-id"] != b.headers["x-request-id"]);

  // An id that would not go into a header or a log line unescaped, or an overlong one, is replaced.
  for (const std::string& bad : {std::string("has space"), std::string("semi;colon"), std::string(129, 'x'), std::string()}) {
    auto r = post(s, "/v1/completions", body.dump(), {{"X-Request-Id", bad}});
    INFO(bad);
    REQUIRE(r.status == 200);
    CHECK(std::regex_match(r.headers["x-request-id"], kMadeId));
  }
  auto longest = post(s, "/v1/completions", body.dump(), {{"X-Request-Id", std::string(128, 'y')}});
  CHECK(longest.headers["x-request-id"] == std::string(128, 'y'));

  // Refusals and the other routes carry it too.
  auto bad_json = post(s, "/v1/completions", "{\"prompt\": ", {{"X-Request-Id", "refused-1"}});
  CHECK(bad_json.status == 400);
  CHECK(bad_json.headers["x-request-id"] == "refused-1");
  auto unknown_model = post(s, "/v1/completions", json{{"model", "nope"}, {"prompt", "x"}}.dump(), {{"X-Request-Id", "refused-2"}});
  CHECK(unknown_model.status == 404);
  CHECK(unknown_model.headers["x-request-id"] == "refused-2");
  auto generate = post(s, "/v1/generate", json{{"prompt", "Once"}, {"max_tokens", 3}}.dump(), {{"X-Request-Id", "own-route"}});
  CHECK(generate.status == 200);
  CHECK(generate.headers["x-request-id"] == "own-route");
  CHECK(generate.body["finish_reason"] == "length");

  // A streamed answer carries it in its head.
  HttpClientRequest req;
  req.method = "POST";
  req.target = "/v1/completions";
  req.content_type = "application/json";
  req.headers = {{"X-Request-Id", "streamed-7"}};
  json streamed = body;
  streamed["stream"] = true;
  req.body = streamed.dump();
  std::string events;
  auto r = s.client().stream(req, [&](const HttpClientResult&, std::string_view data) {
    events.append(data);
    return true;
  });
  REQUIRE(r.status == 200);
  CHECK(r.header("X-Request-Id") == "streamed-7");
  CHECK(events.find("data: [DONE]") != std::string::npos);
}

TEST_CASE("request ids: log lines about a request name its id", "[request_id]") {
  CapturedLog log;
  LiveServer s(stories_manifest());
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};

  // A request's end, with its route, model, engine and tokens.
  REQUIRE(post(s, "/v1/completions", body.dump(), {{"X-Request-Id", "logged-1"}}).status == 200);
  REQUIRE(eventually([&] { return !log.lines_with({"request logged-1:", "completions", "engine main", "done"}).empty(); }));

  // A refusal.
  REQUIRE(post(s, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", -3}}.dump(), {{"X-Request-Id", "logged-2"}}).status == 400);
  CHECK_FALSE(log.lines_with({"request logged-2:", "refused (400)"}).empty());

  // A client that leaves mid-stream: its request ends cancelled, and the line says whose it was.
  json long_body = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0}, {"ignore_eos", true}};
  auto left = stream(s, "/v1/completions", long_body, 2, {{"X-Request-Id", "logged-3"}});
  CHECK(left.events == 2);
  REQUIRE(eventually([&] { return !log.lines_with({"request logged-3:", "cancelled"}).empty(); }, std::chrono::seconds(10)));
}

}  // namespace server_request_ids_tests
