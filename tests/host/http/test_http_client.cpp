// The HTTP client against our own listener on loopback: whole answers on one kept connection, a
// connection the server closed while it idled, chunked streams handed over as they arrive, a sink
// that cancels, and the failures a caller must be able to tell apart (refused, read timeout, a body
// over the limit), each said with the URL.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "eventually.hpp"
#include "http/http_client.hpp"
#include "http/http_listener.hpp"

namespace http_client_tests {

using namespace tokenhost;
using tokenhost::testing::eventually;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// A listener on 127.0.0.1 (a free port) with the routes a test adds, serving from start() on.
struct Server {
  explicit Server(HttpLimits limits = {}) : listener("test", limits, 2, 2) { port = listener.bind("127.0.0.1", 0); }
  ~Server() { listener.stop(); }
  HttpClient client(HttpClientOptions options = {}) {
    listener.start();
    return HttpClient("127.0.0.1", port, std::move(options));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  HttpListener listener;
  int port = 0;
};

// Writes the second piece once `seen` is set, looking again every 2 ms on the exchange's strand.
void second_piece_when(std::shared_ptr<HttpExchange> ex, const std::atomic<bool>& seen) {
  if (!seen) return ex->post([ex, &seen] { second_piece_when(ex, seen); }, 2ms);
  ex->write("data: two\n\n");
  ex->end_stream();
}

// A line every 5 ms until the client is gone.
void tick(std::shared_ptr<HttpExchange> ex) {
  if (ex->write("tick\n")) ex->post([ex] { tick(ex); }, 5ms);
}

}  // namespace

TEST_CASE("http client: whole answers with their status and headers, on one kept connection", "[http][client]") {
  Server s;
  s.listener.route("GET", "/hello", [](const HttpRequest& req, HttpResponse& res) {
    res.set_header("X-Seen-Auth", req.header("Authorization"));
    res.set_content("hello " + req.param("who"), "text/plain");
  });
  s.listener.route("POST", "/echo", [](const HttpRequest& req, HttpResponse& res) {
    res.status = 201;
    res.set_content(req.body, req.header("Content-Type"));
  });
  HttpClientOptions options;
  options.headers.emplace_back("Authorization", "Bearer abc");
  HttpClient c = s.client(options);

  HttpClientResult r = c.request("GET", "/hello?who=you");
  REQUIRE(r.ok());
  CHECK(r.message.empty());
  CHECK(r.status == 200);
  CHECK(r.reason == "OK");
  CHECK(r.body == "hello you");
  CHECK(r.header("content-type") == "text/plain");
  CHECK(r.header("X-Seen-Auth") == "Bearer abc");
  CHECK(r.header("no-such-header").empty());

  r = c.request("POST", "/echo", R"({"a": 1})", "application/json");
  REQUIRE(r.ok());
  CHECK(r.status == 201);
  CHECK(r.reason == "Created");
  CHECK(r.body == R"({"a": 1})");
  CHECK(r.header("Content-Type") == "application/json");

  r = c.request("GET", "/nowhere");
  REQUIRE(r.ok());  // an HTTP error status is an answer, not a failure
  CHECK(r.status == 404);
  CHECK(s.listener.connections() == 1);  // all three on one connection
}

TEST_CASE("http client: a kept connection the server closed while it idled is opened again", "[http][client]") {
  HttpLimits limits;
  limits.idle_timeout = 100ms;
  std::mutex mutex;  // before the server: its handlers use them until it stops
  std::vector<int> ports;
  Server s(limits);
  s.listener.route("GET", "/port", [&](const HttpRequest& req, HttpResponse& res) {
    std::lock_guard lock(mutex);
    ports.push_back(req.remote_port);
    res.set_content("ok", "text/plain");
  });
  HttpClient c = s.client();
  REQUIRE(c.request("GET", "/port").ok());
  REQUIRE(eventually([&] { return s.listener.connections() == 0; }));  // the server's idle deadline passed
  HttpClientResult r = c.request("GET", "/port");
  INFO(r.message);
  REQUIRE(r.ok());
  CHECK(r.body == "ok");
  REQUIRE(ports.size() == 2);
  CHECK(ports[0] != ports[1]);  // a new connection
}

TEST_CASE("http client: a chunked stream reaches the sink piece by piece as it arrives", "[http][client]") {
  // The second piece is written only once the client has handed the first to its sink: a client that
  // waited for the whole answer would wait for ever (here: until its read timeout).
  std::atomic<bool> first_seen{false};
  Server s;
  s.listener.route_async("GET", "/stream", [&](std::shared_ptr<HttpExchange> ex) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    ex->start_stream(std::move(head));
    ex->write("data: one\n\n");
    second_piece_when(ex, first_seen);
  });
  HttpClientOptions options;
  options.read_timeout = 5s;
  HttpClient c = s.client(options);
  std::vector<std::string> pieces;
  int status_seen = 0;
  HttpClientRequest req;
  req.target = "/stream";
  HttpClientResult r = c.stream(req, [&](const HttpClientResult& head, std::string_view data) {
    status_seen = head.status;
    pieces.emplace_back(data);
    first_seen = true;
    return true;
  });
  INFO(r.message);
  REQUIRE(r.ok());
  CHECK(r.status == 200);
  CHECK(status_seen == 200);
  CHECK(r.header("Transfer-Encoding") == "chunked");
  CHECK(r.body.empty());
  REQUIRE(pieces == std::vector<std::string>{"data: one\n\n", "data: two\n\n"});
  // The stream ended cleanly: the connection serves the next request.
  REQUIRE(c.request("GET", "/stream").ok());
  CHECK(s.listener.connections() == 1);
}

TEST_CASE("http client: a sink that returns false cancels, and the server sees the client leave", "[http][client]") {
  std::atomic<bool> gone{false};
  Server s;
  s.listener.route_async("GET", "/endless", [&](std::shared_ptr<HttpExchange> ex) {
    ex->on_gone([&gone] { gone = true; });
    ex->start_stream(HttpResponse{});
    tick(ex);
  });
  s.listener.route("GET", "/after", [](const HttpRequest&, HttpResponse& res) { res.set_content("still here", "text/plain"); });
  HttpClient c = s.client();
  int pieces = 0;
  HttpClientRequest req;
  req.target = "/endless";
  HttpClientResult r = c.stream(req, [&](const HttpClientResult&, std::string_view) { return ++pieces < 3; });
  CHECK(r.error == HttpClientError::cancelled);
  CHECK(r.status == 200);
  CHECK(pieces == 3);
  CHECK(r.message == "reading the answer to GET " + s.url() + "/endless was cancelled");
  CHECK(eventually([&] { return gone.load(); }));
  // The next request goes out on a new connection.
  r = c.request("GET", "/after");
  REQUIRE(r.ok());
  CHECK(r.body == "still here");
}

TEST_CASE("http client: nothing listening is a refused connection naming the URL", "[http][client]") {
  int port = 0;
  {
    Server s;  // a port that was free a moment ago, and closed again
    port = s.port;
  }
  HttpClient c("127.0.0.1", port);
  HttpClientResult r = c.request("GET", "/");
  CHECK(r.error == HttpClientError::refused);
  CHECK(r.status == 0);
  CHECK(r.message == "cannot connect to http://127.0.0.1:" + std::to_string(port) + ": connection refused");
  HttpClientRequest req;
  r = c.stream(req, [](const HttpClientResult&, std::string_view) { return true; });
  CHECK(r.error == HttpClientError::refused);
}

TEST_CASE("http client: an answer that does not come within the read timeout", "[http][client]") {
  std::mutex mutex;
  std::vector<std::shared_ptr<HttpExchange>> held;  // answered never (until the listener stops)
  Server s;
  s.listener.route_async("POST", "/silent", [&](std::shared_ptr<HttpExchange> ex) {
    std::lock_guard lock(mutex);
    held.push_back(std::move(ex));
  });
  s.listener.route_async("GET", "/stalls", [&](std::shared_ptr<HttpExchange> ex) {
    ex->start_stream(HttpResponse{});
    ex->write("first");
    std::lock_guard lock(mutex);
    held.push_back(std::move(ex));
  });
  HttpClientOptions options;
  options.read_timeout = 200ms;
  HttpClient c = s.client(options);
  const auto started = std::chrono::steady_clock::now();
  HttpClientResult r = c.request("POST", "/silent", "{}", "application/json");
  const auto waited = std::chrono::steady_clock::now() - started;
  CHECK(r.error == HttpClientError::read_timeout);
  CHECK(r.message == "reading the answer to POST " + s.url() + "/silent timed out (nothing for 200 ms)");
  CHECK(waited >= 190ms);
  CHECK(waited < 2s);

  // A stream that stops mid-way: the status is kept, the pieces before the stop were handed over.
  std::string got;
  HttpClientRequest req;
  req.target = "/stalls";
  r = c.stream(req, [&](const HttpClientResult&, std::string_view data) {
    got.append(data);
    return true;
  });
  CHECK(r.error == HttpClientError::read_timeout);
  CHECK(r.status == 200);
  CHECK(got == "first");
}

TEST_CASE("http client: a whole answer over the body limit is refused, declared or chunked", "[http][client]") {
  Server s;
  s.listener.route("GET", "/big", [](const HttpRequest&, HttpResponse& res) { res.set_content(std::string(5000, 'x'), "text/plain"); });
  s.listener.route_async("GET", "/big-chunked", [](std::shared_ptr<HttpExchange> ex) {
    ex->start_stream(HttpResponse{});
    for (int i = 0; i < 5; ++i) ex->write(std::string(1000, 'y'));
    ex->end_stream();
  });
  HttpClientOptions options;
  options.max_body_bytes = 4096;
  HttpClient c = s.client(options);
  for (const std::string path : {"/big", "/big-chunked"}) {
    INFO(path);
    HttpClientResult r = c.request("GET", path);
    CHECK(r.error == HttpClientError::too_large);
    CHECK(r.status == 200);
    CHECK(r.body.empty());
    CHECK(r.message == "the answer to GET " + s.url() + path + " is larger than the limit of 4096 bytes");
  }
  // A stream has no limit of its own: its sink sees every byte.
  size_t streamed = 0;
  HttpClientRequest req;
  req.target = "/big-chunked";
  HttpClientResult r = c.stream(req, [&](const HttpClientResult&, std::string_view data) {
    streamed += data.size();
    return true;
  });
  REQUIRE(r.ok());
  CHECK(streamed == 5000);
  options.max_body_bytes = 5000;
  HttpClient roomy = s.client(options);
  CHECK(roomy.request("GET", "/big").body.size() == 5000);
}

}  // namespace http_client_tests
