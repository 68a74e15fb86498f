// The HTTP listener against careless and hostile clients, over raw loopback sockets: deadlines, body
// and header limits, framing, the connection cap, streams to slow readers, clients that leave, and
// many connections on few threads.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "http/http_listener.hpp"
#include "raw_client.hpp"

namespace http_listener_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n";
}

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A listener on a free loopback port with a /hello route and an /echo route; limits short enough for
// tests.
struct TestListener {
  explicit TestListener(HttpLimits limits = short_limits(), size_t io_threads = 2) : l("test", limits, io_threads, 2) {
    l.route("GET", "/hello", [](const HttpRequest& req, HttpResponse& res) {
      res.set_content("hello " + req.param("name"), "text/plain");
    });
    l.route("POST", "/echo", [](const HttpRequest& req, HttpResponse& res) { res.set_content(req.body, "text/plain"); });
    l.route("GET", R"(/items/([^/]+))", [](const HttpRequest& req, HttpResponse& res) {
      res.set_content("item " + req.matches.at(1), "text/plain");
    });
  }
  void start() {
    port = l.bind("127.0.0.1", 0);
    l.start();
  }
  static HttpLimits short_limits() {
    HttpLimits limits;
    limits.max_body_bytes = 1024;
    limits.header_timeout = 300ms;
    limits.body_timeout = 300ms;
    limits.idle_timeout = 500ms;
    limits.max_connections = 64;
    limits.stream_buffer_bytes = 64 << 10;
    return limits;
  }
  HttpListener l;
  int port = 0;
};

// A route whose exchanges stay unanswered, kept for the test to answer (or not).
struct HeldExchange {
  void route(HttpListener& l, const std::string& path) {
    l.route_async("GET", path, [this](std::shared_ptr<HttpExchange> ex) {
      std::lock_guard lock(m);
      held = std::move(ex);
    });
  }
  std::shared_ptr<HttpExchange> get() {  // written on an I/O thread: read under the same lock
    std::lock_guard lock(m);
    return held;
  }
  std::mutex m;
  std::shared_ptr<HttpExchange> held;
};

}  // namespace

TEST_CASE("http: routes answer with their status, headers, query parameters and path groups", "[http]") {
  TestListener t;
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/hello?name=a%20b+c")));
  std::string r = c.read(2s, "hello a b c");
  REQUIRE_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
  REQUIRE_THAT(r, Contains("Content-Length: 11\r\n"));
  // The same connection serves the next request (keep-alive), a path group, then a 404.
  REQUIRE(c.send(get("/items/x%2Fy")));
  REQUIRE_THAT(c.read(2s, "item x/y"), Contains("item x/y"));
  REQUIRE(c.send(get("/nothing")));
  REQUIRE_THAT(c.read(2s, "no route GET /nothing"), Contains("HTTP/1.1 404 Not Found"));
}

TEST_CASE("http: pipelined requests on one connection are answered in order", "[http]") {
  TestListener t;
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/hello?name=1") + post("/echo", "two") + get("/hello?name=3")));
  const std::string r = c.read(2s, "hello 3");
  const size_t one = r.find("hello 1"), two = r.find("two"), three = r.find("hello 3");
  REQUIRE(one != std::string::npos);
  REQUIRE(two != std::string::npos);
  REQUIRE(three != std::string::npos);
  REQUIRE(one < two);
  REQUIRE(two < three);
}

TEST_CASE("http: headers that never complete are cut off at the deadline while others are served", "[http]") {
  TestListener t;
  t.start();
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_unique<RawClient>(t.port));
    REQUIRE(slow.back()->send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Slow: "));  // and never the end
  }
  // Meanwhile a normal client is answered at once.
  const auto started = std::chrono::steady_clock::now();
  RawClient ok(t.port);
  REQUIRE(ok.send(get("/hello?name=x")));
  REQUIRE_THAT(ok.read(2s, "hello x"), Contains("hello x"));
  REQUIRE(std::chrono::steady_clock::now() - started < 250ms);
  // A byte now and then does not extend the deadline: headers are due within header_timeout.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(100ms);
    slow.front()->send("x");
  }
  for (auto& s : slow) REQUIRE(s->closed_within(1s));
}

TEST_CASE("http: a body larger than the limit is refused with 413, declared or chunked, and nothing else is lost", "[http]") {
  TestListener t;
  t.start();
  SECTION("Content-Length over the limit") {
    RawClient c(t.port);
    REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'x')));
    const std::string r = c.read(2s, "bytes\"");
    REQUIRE_THAT(r, StartsWith("HTTP/1.1 413 "));
    REQUIRE_THAT(r, Contains("larger than the limit of 1024 bytes"));
    REQUIRE(c.closed_within(7s));
  }
  SECTION("chunked, past the limit while it is read") {
    RawClient c(t.port);
    REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
    for (int i = 0; i < 4; ++i) c.send("200\r\n" + std::string(512, 'y') + "\r\n");  // 2048 bytes in all
    REQUIRE_THAT(c.read(2s, "bytes\""), StartsWith("HTTP/1.1 413 "));
  }
  SECTION("chunked within the limit is read whole") {
    RawClient c(t.port);
    REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
    REQUIRE_THAT(c.read(2s, "hello world"), Contains("hello world"));
  }
  RawClient after(t.port);
  REQUIRE(after.send(get("/hello?name=still")));
  REQUIRE_THAT(after.read(2s, "hello still"), Contains("200 OK"));
}

TEST_CASE("http: a request with both Content-Length and Transfer-Encoding is refused", "[http]") {
  TestListener t;
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
  const std::string r = c.read(2s, "}");
  REQUIRE_THAT(r, StartsWith("HTTP/1.1 400 "));
  REQUIRE_THAT(r, Contains("\"type\":\"invalid_request_error\""));
  REQUIRE(r.find("hello") == std::string::npos);
}

TEST_CASE("http: a body that stops arriving is cut off, and headers past their limit get 431", "[http]") {
  TestListener t;
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly part"));
  REQUIRE(c.closed_within(1500ms));
  RawClient big(t.port);
  REQUIRE(big.send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(20000, 'h') + "\r\n\r\n"));
  REQUIRE_THAT(big.read(2s, "}"), StartsWith("HTTP/1.1 431 "));
}

TEST_CASE("http: a chunked body's trailer counts against the header limit, whatever its size", "[http]") {
  TestListener t;  // headers up to 16 KiB
  t.start();
  const std::string head = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  SECTION("a small trailer is read and the body answered") {
    RawClient c(t.port);
    REQUIRE(c.send(head + "5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"));
    REQUIRE_THAT(c.read(2s, "hello"), StartsWith("HTTP/1.1 200 "));
  }
  // 70,000 bytes: one field value past what Beast's fields can hold (it threw, ending the process);
  // 20,000: within that, past the header limit (it was taken).
  for (size_t bytes : {size_t(70000), size_t(20000)}) {
    DYNAMIC_SECTION("a " << bytes << "-byte trailer field gets 431") {
      RawClient c(t.port);
      REQUIRE(c.send(head + "0\r\nX-T: " + std::string(bytes, 'a') + "\r\n\r\n"));
      const std::string r = c.read(2s, "bytes\"");
      REQUIRE_THAT(r, StartsWith("HTTP/1.1 431 "));
      REQUIRE_THAT(r, Contains("chunk line or trailer larger than the header limit of 16384 bytes"));
    }
  }
  SECTION("a large trailer after chunks whose data holds empty lines gets 431") {
    RawClient c(t.port);
    REQUIRE(c.send(head + "6\r\na\r\n\r\nb\r\n0\r\nX-T: " + std::string(50000, 'a') + "\r\n\r\n"));
    REQUIRE_THAT(c.read(2s, "bytes\""), StartsWith("HTTP/1.1 431 "));
  }
  SECTION("a last-chunk line that never ends gets 431 once the read buffer is full") {
    RawClient c(t.port);
    REQUIRE(c.send(head + "0;ext=" + std::string(200000, 'e')));
    REQUIRE_THAT(c.read(2s, "bytes\""), StartsWith("HTTP/1.1 431 "));
  }
  RawClient after(t.port);
  REQUIRE(after.send(get("/hello?name=still")));
  REQUIRE_THAT(after.read(2s, "hello still"), Contains("200 OK"));
}

TEST_CASE("http: an exception from inside Beast ends its connection, not the process", "[http]") {
  // With headers allowed past 64 KiB, a header field of 70,000 bytes makes Beast's fields container
  // throw (std::length_error) from inside the read: the I/O thread catches it, the connection closes.
  HttpLimits limits = TestListener::short_limits();
  limits.max_header_bytes = 256 << 10;
  TestListener t(limits);
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send("GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(70000, 'h') + "\r\n\r\n"));
  REQUIRE(c.closed_within(2s));
  for (int i = 0; i < 3; ++i) {  // both I/O threads still serve
    RawClient after(t.port);
    REQUIRE(after.send(get("/hello?name=still")));
    REQUIRE_THAT(after.read(2s, "hello still"), Contains("200 OK"));
  }
}

TEST_CASE("http: each of the parser's errors ends its request with a 400 naming it, and the listener serves on", "[http]") {
  // Every error Beast's request parser reports for malformed input (boost/beast/http/error.hpp), each
  // from the bytes that cause it: the client gets 400 "malformed HTTP request: <Beast's words>", its
  // connection closes, nothing reaches a route, and the next client is served. (Limits: 413 and 431,
  // above; a connection that ends mid-message: end_of_stream and partial_message, below. A folded
  // header line Beast unfolds, as RFC 9112 allows: bad_obs_fold is not reached from the wire.)
  TestListener t;
  std::atomic<int> routed{0};
  t.l.route("POST", "/count", [&](const HttpRequest&, HttpResponse& res) {
    ++routed;
    res.set_content("counted", "text/plain");
  });
  t.start();
  const std::string chunked = "POST /count HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::vector<std::tuple<const char*, std::string, const char*>> cases = {
      {"bad_method", "G(T /hello HTTP/1.1\r\nHost: t\r\n\r\n", "bad method"},
      {"bad_target", "GET /he\x01llo HTTP/1.1\r\nHost: t\r\n\r\n", "bad target"},
      {"bad_version", "GET /hello HTTP/9.Z\r\nHost: t\r\n\r\n", "bad version"},
      {"bad_line_ending", "GET /hello HTTP/1.1\r\nHost: t\r\r\n\r\n", "bad line ending"},
      {"bad_field", "GET /hello HTTP/1.1\r\nHost: t\r\nBad Field: x\r\n\r\n", "bad field"},
      {"bad_value", "GET /hello HTTP/1.1\r\nHost: t\r\nX-A: a\x01" "b\r\n\r\n", "bad value"},
      {"bad_content_length", "POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n", "bad Content-Length"},
      {"multiple_content_length", "POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
       "multiple Content-Length"},
      // Beast reads a request whose Transfer-Encoding does not end in chunked as bodiless (the listener's own check).
      {"bad_transfer_encoding", "POST /count HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, gzip\r\n\r\nPOST /count HTTP/1.1\r\n",
       "bad Transfer-Encoding 'chunked, gzip' (a request's must end with chunked)"},
      {"bad_chunk", chunked + "zz\r\nhello\r\n0\r\n\r\n", "bad chunk"},
      {"bad_chunk_extension", chunked + "5;\x01\r\nhello\r\n0\r\n\r\n", "bad chunk extension"},
  };
  for (const auto& [name, bytes, words] : cases) {
    INFO(name);
    RawClient c(t.port);
    REQUIRE(c.send(bytes));
    const std::string r = c.read(2s, "}");
    CHECK_THAT(r, StartsWith("HTTP/1.1 400 "));
    CHECK_THAT(r, Contains(std::string("malformed HTTP request: ") + words));
    CHECK(c.closed_within(2s));
  }
  CHECK(routed == 0);
  // A connection that ends before its request does: closed, nothing answered, nothing routed.
  for (const std::string& partial : {std::string("GET /hel"), std::string("POST /count HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\nabc")}) {
    RawClient c(t.port);
    REQUIRE(c.send(partial));
    c.shutdown_write();
    CHECK(c.closed_within(2s));
    const std::string r = c.read(0ms);  // nothing, or a 400 saying so
    if (!r.empty()) CHECK_THAT(r, StartsWith("HTTP/1.1 400 ") && Contains("malformed HTTP request: partial message"));
  }
  CHECK(routed == 0);
  RawClient after(t.port);
  REQUIRE(after.send(post("/count", "{}")));
  REQUIRE_THAT(after.read(2s, "counted"), StartsWith("HTTP/1.1 200 "));
  CHECK(routed == 1);
}

TEST_CASE("http: an idle keep-alive connection is closed after the idle deadline", "[http]") {
  TestListener t;
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/hello?name=i")));
  REQUIRE_THAT(c.read(1s, "hello i"), Contains("hello i"));
  const auto started = std::chrono::steady_clock::now();
  REQUIRE(c.closed_within(3s));
  REQUIRE(std::chrono::steady_clock::now() - started >= 400ms);
  // A silent connection that never sends a byte goes the same way.
  RawClient silent(t.port);
  REQUIRE(silent.closed_within(3s));
}

TEST_CASE("http: past the connection cap, busy connections keep theirs: a new one gets 503, a reserved path an answer", "[http]") {
  HttpLimits limits = TestListener::short_limits();
  limits.max_connections = 4;
  limits.idle_timeout = 10s;
  limits.header_timeout = 10s;
  limits.reserved_paths = {"/hello"};
  TestListener t(limits);
  std::mutex m;
  std::vector<std::shared_ptr<HttpExchange>> busy;  // requests left unanswered: their connections are busy
  t.l.route_async("GET", "/hold", [&](std::shared_ptr<HttpExchange> ex) {
    std::lock_guard lock(m);
    busy.push_back(std::move(ex));
  });
  t.start();
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawClient>(t.port));
    REQUIRE(held.back()->send(get("/hold")));
  }
  for (int i = 0; i < 200 && [&] { std::lock_guard lock(m); return busy.size(); }() < 4; ++i) std::this_thread::sleep_for(10ms);
  RawClient extra(t.port);
  REQUIRE(extra.send(get("/items/x")));
  const std::string r = extra.read(2s, "}");
  REQUIRE_THAT(r, StartsWith("HTTP/1.1 503 "));
  REQUIRE_THAT(r, Contains("too many open connections (4)"));
  RawClient probe(t.port);  // a health probe's path still gets through, and its connection is closed after
  REQUIRE(probe.send(get("/hello?name=probe")));
  REQUIRE_THAT(probe.read(2s, "hello probe"), StartsWith("HTTP/1.1 200 "));
  REQUIRE(probe.closed_within(2s));
  {
    std::lock_guard lock(m);
    for (auto& ex : busy) {
      HttpResponse res;
      res.set_content("done", "text/plain");
      ex->reply(std::move(res));
    }
  }
  REQUIRE_THAT(held[0]->read(2s, "done"), Contains("200 OK"));
}

TEST_CASE("http: with the cap full of connections waiting for a request, a new one takes the longest-waiting one's place", "[http]") {
  HttpLimits limits = TestListener::short_limits();
  limits.max_connections = 4;
  limits.idle_timeout = 10s;
  limits.header_timeout = 10s;
  TestListener t(limits);
  t.start();
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {  // idle keep-alive after one answer each, the first the longest
    held.push_back(std::make_unique<RawClient>(t.port));
    REQUIRE(held.back()->send(get("/hello?name=" + std::to_string(i))));
    REQUIRE_THAT(held.back()->read(2s, "hello " + std::to_string(i)), Contains("200 OK"));
    std::this_thread::sleep_for(20ms);
  }
  RawClient next(t.port);
  REQUIRE(next.send(get("/hello?name=next")));
  REQUIRE_THAT(next.read(2s, "hello next"), Contains("200 OK"));
  REQUIRE(held[0]->closed_within(2s));  // the longest waiting made room
  REQUIRE(held[3]->send(get("/hello?name=still")));  // the others keep theirs
  REQUIRE_THAT(held[3]->read(2s, "hello still"), Contains("200 OK"));
}

TEST_CASE("http: a stream to a client that does not read stops at the buffer bound", "[http]") {
  TestListener t;
  std::mutex m;
  std::condition_variable cv;
  size_t accepted = 0;
  bool refused = false;
  t.l.route_async("GET", "/flood", [&](std::shared_ptr<HttpExchange> ex) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    ex->start_stream(head);
    // Written from another thread, as an engine's tokens are: it must never block.
    std::thread([&, ex] {
      const std::string chunk(4096, 'z');
      for (int i = 0; i < 100000; ++i) {
        if (!ex->write(chunk)) {
          std::lock_guard lock(m);
          refused = true;
          cv.notify_all();
          return;
        }
        std::lock_guard lock(m);
        accepted += chunk.size();
      }
      ex->end_stream();
    }).detach();
  });
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/flood")));  // and never read
  std::unique_lock lock(m);
  REQUIRE(cv.wait_for(lock, 10s, [&] { return refused; }));
  // The socket buffers take some; past them at most the bound waits in memory.
  REQUIRE(accepted < size_t(64 << 20));
  lock.unlock();
  REQUIRE(c.closed_within(3s));
}

TEST_CASE("http: a client that leaves while its request is worked on is seen at once", "[http]") {
  TestListener t;
  std::atomic<bool> gone{false};
  std::shared_ptr<HttpExchange> held;
  std::mutex m;
  t.l.route_async("GET", "/wait", [&](std::shared_ptr<HttpExchange> ex) {
    ex->on_gone([&] { gone = true; });
    std::lock_guard lock(m);
    held = ex;  // never answered
  });
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/wait")));
  const auto is_held = [&] {  // held is written on an I/O thread: read it under the same lock
    std::lock_guard lock(m);
    return held != nullptr;
  };
  for (int i = 0; i < 100 && !is_held(); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE_FALSE(gone);
  c.close();
  for (int i = 0; i < 100 && !gone; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(gone);
  std::lock_guard lock(m);
  REQUIRE(held->gone());
  REQUIRE_FALSE(held->write("late"));
  held->reply(HttpResponse{});  // answering a departed client is harmless
}

TEST_CASE("http: a client that sent more bytes and then left is seen although its bytes are unread", "[http]") {
  TestListener t;
  std::atomic<bool> gone{false}, held{false};
  t.l.route_async("GET", "/wait", [&](std::shared_ptr<HttpExchange> ex) {
    ex->on_gone([&] { gone = true; });
    held = true;
    ex->post([ex] {}, 10s);  // kept, never answered
  });
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/wait") + "GET /hel"));  // the next request's first bytes wait in the socket
  for (int i = 0; i < 100 && !held; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(held);
  std::this_thread::sleep_for(300ms);
  REQUIRE_FALSE(gone);
  c.close();
  for (int i = 0; i < 200 && !gone; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(gone);
}

TEST_CASE("http: drain lets an answer given just before stop reach its client and takes no new connection", "[http]") {
  TestListener t;
  const std::string body(256 << 10, 'x');  // more than one write on loopback
  HeldExchange later;
  later.route(t.l, "/later");
  t.start();
  RawClient idle(t.port);  // a kept-alive connection between requests: nothing to wait for
  REQUIRE(idle.send(get("/hello?name=i")));
  REQUIRE_THAT(idle.read(2s, "hello i"), Contains("hello i"));
  RawClient c(t.port);
  REQUIRE(c.send(get("/later")));
  for (int i = 0; i < 200 && !later.get(); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(later.get());
  REQUIRE(t.l.unanswered() == 1);
  HttpResponse r;
  r.set_content(body, "text/plain");
  later.get()->reply(std::move(r));  // queued on the connection's strand; stop() would drop it
  REQUIRE(t.l.drain(5s) == 0);
  REQUIRE(t.l.unanswered() == 0);
  REQUIRE_FALSE(RawClient(t.port).connected());  // the acceptor is closed
  t.l.stop();
  const std::string got = c.read(3s);
  REQUIRE_THAT(got, StartsWith("HTTP/1.1 200"));
  REQUIRE(got.size() >= body.size());
  REQUIRE(got.compare(got.size() - body.size(), body.size(), body) == 0);
}

TEST_CASE("http: drain gives up after its timeout on a request never answered and says how many", "[http]") {
  TestListener t;
  HeldExchange never;
  never.route(t.l, "/never");
  t.start();
  RawClient c(t.port);
  REQUIRE(c.send(get("/never")));
  for (int i = 0; i < 200 && t.l.unanswered() == 0; ++i) std::this_thread::sleep_for(10ms);
  const auto started = std::chrono::steady_clock::now();
  REQUIRE(t.l.drain(300ms) == 1);
  REQUIRE(std::chrono::steady_clock::now() - started >= 300ms);
  t.l.stop();
  REQUIRE(c.closed_within(2s));
}

TEST_CASE("http: blocking handlers do not hold up the I/O threads", "[http]") {
  TestListener t(TestListener::short_limits(), 1);  // one I/O thread
  t.l.route("GET", "/slow", [](const HttpRequest&, HttpResponse& res) {
    std::this_thread::sleep_for(800ms);
    res.set_content("slow", "text/plain");
  });
  t.start();
  RawClient slow(t.port);
  REQUIRE(slow.send(get("/slow")));
  std::this_thread::sleep_for(50ms);
  const auto started = std::chrono::steady_clock::now();
  RawClient fast(t.port);
  REQUIRE(fast.send(get("/hello?name=f")));
  REQUIRE_THAT(fast.read(2s, "hello f"), Contains("hello f"));
  REQUIRE(std::chrono::steady_clock::now() - started < 400ms);
  REQUIRE_THAT(slow.read(3s, "slow"), Contains("200 OK"));
}

TEST_CASE("http: two I/O threads serve 2000 open connections", "[http][load]") {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 4500) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4500);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  getrlimit(RLIMIT_NOFILE, &lim);
  constexpr size_t kConnections = 2000;
  if (lim.rlim_cur < 2 * kConnections + 200) {
    WARN("SKIPPED: the open-file limit " << lim.rlim_cur << " is below " << 2 * kConnections + 200);
    return;
  }
  HttpLimits limits = TestListener::short_limits();
  limits.idle_timeout = 30s;
  limits.header_timeout = 30s;
  limits.max_connections = kConnections + 10;
  TestListener t(limits, 2);
  t.start();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (size_t i = 0; i < kConnections; ++i) {
    clients.push_back(std::make_unique<RawClient>(t.port));
    REQUIRE(clients.back()->connected());
  }
  for (size_t i = 0; i < kConnections; ++i) REQUIRE(clients[i]->send(get("/hello?name=" + std::to_string(i))));
  for (size_t i = 0; i < kConnections; ++i) {
    INFO(i);
    REQUIRE_THAT(clients[i]->read(5s, "hello " + std::to_string(i)), Contains("hello " + std::to_string(i)));
  }
  REQUIRE(t.l.connections() == kConnections);
}

}  // namespace http_listener_tests
