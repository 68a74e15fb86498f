// HTTPS: the listener with a certificate against our client and raw sockets (answers, streams and a
// kept connection over TLS; untrusted or misnamed certificates; plain HTTP and silence on a TLS port;
// a TLS client that leaves) and the certificate files' errors. tests/host/server/test_server_tls.cpp
// has a live server whose ports speak TLS from its manifest.
#include <catch2/catch.hpp>


#include <atomic>
#include <chrono>
#include <thread>

#include "eventually.hpp"
#include "files.hpp"
#include "http/http_client.hpp"
#include "http/http_listener.hpp"
#include "http/http_tls.hpp"
#include "raw_client.hpp"
#include "test_certificates.hpp"

namespace http_tls_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// A TLS listener on a free loopback port with the certificate of `cert`.
struct TlsServer {
  explicit TlsServer(const TestCertificate& cert, HttpLimits limits = {}) : listener("test", limits, 2, 2) {
    listener.use_tls(load_server_tls(cert.certificate_file, cert.private_key_file));
    listener.route("GET", "/hello", [](const HttpRequest& req, HttpResponse& res) { res.set_content("hello " + req.param("name"), "text/plain"); });
    port = listener.bind("127.0.0.1", 0);
    listener.start();
  }
  HttpClient client(const std::string& ca_file, bool verify = true, const std::string& host = "127.0.0.1") {
    HttpClientOptions options;
    options.tls = {true, ca_file, verify};
    options.read_timeout = 5s;
    return HttpClient(host, port, std::move(options));
  }
  HttpListener listener;
  int port = 0;
};

}  // namespace

TEST_CASE("tls: answers and streams over HTTPS, on one kept connection", "[http][tls]") {
  TempDir dir;
  const auto cert = make_test_certificate(dir.path.string(), "server");
  TlsServer s(cert);
  s.listener.route_async("GET", "/stream", [](std::shared_ptr<HttpExchange> ex) {
    ex->start_stream(HttpResponse{});
    for (int i = 0; i < 3; ++i) ex->write("data: " + std::to_string(i) + "\n\n");
    ex->end_stream();
  });
  HttpClient c = s.client(cert.certificate_file);
  CHECK(c.url() == "https://127.0.0.1:" + std::to_string(s.port));
  for (const std::string name : {"one", "two"}) {
    HttpClientResult r = c.request("GET", "/hello?name=" + name);
    REQUIRE(r.ok());
    CHECK(r.status == 200);
    CHECK(r.body == "hello " + name);
  }
  std::string streamed;
  HttpClientRequest req;
  req.target = "/stream";
  HttpClientResult r = c.stream(req, [&](const HttpClientResult&, std::string_view data) {
    streamed += data;
    return true;
  });
  REQUIRE(r.ok());
  CHECK(streamed == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  CHECK(s.listener.connections() == 1);  // the three requests shared one TLS connection
  // By name too: the certificate names localhost.
  HttpClientResult named = s.client(cert.certificate_file, true, "localhost").request("GET", "/hello?name=x");
  REQUIRE(named.ok());
  CHECK(named.body == "hello x");
}

TEST_CASE("tls: a certificate the client does not trust, or for another name, fails the handshake saying why", "[http][tls]") {
  TempDir dir;
  const auto cert = make_test_certificate(dir.path.string(), "server");
  const auto stranger = make_test_certificate(dir.path.string(), "stranger");
  TlsServer s(cert);
  HttpClientResult r = s.client(stranger.certificate_file).request("GET", "/hello");
  CHECK(r.error == HttpClientError::tls);
  CHECK_THAT(r.message, Contains("TLS handshake with https://127.0.0.1:" + std::to_string(s.port) + " failed: certificate verify failed"));
  CHECK_THAT(r.message, Contains("self-signed certificate"));

  const auto elsewhere = make_test_certificate(dir.path.string(), "elsewhere", "DNS:elsewhere.example");
  TlsServer misnamed(elsewhere);
  r = misnamed.client(elsewhere.certificate_file).request("GET", "/hello");
  CHECK(r.error == HttpClientError::tls);
  CHECK_THAT(r.message, Contains("certificate verify failed"));

  // Without verification the connection is made (encrypted, not authenticated).
  r = misnamed.client("", false).request("GET", "/hello?name=anyway");
  REQUIRE(r.ok());
  CHECK(r.body == "hello anyway");

  r = s.client(dir.file("missing.crt")).request("GET", "/hello");
  CHECK(r.error == HttpClientError::tls);
  CHECK_THAT(r.message, Contains("CA file " + dir.file("missing.crt")));

  // A TLS client against a plain HTTP port fails its handshake, it does not hang.
  HttpListener plain("plain", HttpLimits{}, 1, 1);
  const int plain_port = plain.bind("127.0.0.1", 0);
  plain.start();
  HttpClientOptions options;
  options.tls = {true, cert.certificate_file, true};
  options.connect_timeout = 3s;
  r = HttpClient("127.0.0.1", plain_port, options).request("GET", "/hello");
  CHECK(r.error == HttpClientError::tls);
}

TEST_CASE("tls: plain HTTP on a TLS port is told to use https, and a handshake that never comes is cut off", "[http][tls]") {
  TempDir dir;
  const auto cert = make_test_certificate(dir.path.string(), "server");
  HttpLimits limits;
  limits.header_timeout = 300ms;
  TlsServer s(cert, limits);

  RawClient plain(s.port);
  REQUIRE(plain.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string answer = plain.read(3s);
  CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 400 "));
  CHECK_THAT(answer, Contains("this port speaks HTTPS"));

  RawClient silent(s.port);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(silent.closed_within(3s));
  CHECK(silent.read(0ms).empty());
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);

  RawClient garbage(s.port);
  REQUIRE(garbage.send(std::string(64, '\x16')));
  CHECK(garbage.closed_within(3s));

  // And the port still serves.
  HttpClientResult r = s.client(cert.certificate_file).request("GET", "/hello?name=after");
  REQUIRE(r.ok());
  CHECK(r.body == "hello after");
}

TEST_CASE("tls: a TLS client that leaves while its answer streams is seen", "[http][tls]") {
  TempDir dir;
  const auto cert = make_test_certificate(dir.path.string(), "server");
  TlsServer s(cert);
  std::atomic<bool> gone{false};
  s.listener.route_async("GET", "/endless", [&](std::shared_ptr<HttpExchange> ex) {
    ex->on_gone([&gone] { gone = true; });
    ex->start_stream(HttpResponse{});
    struct Tick {
      static void next(std::shared_ptr<HttpExchange> ex) {
        if (ex->write("tick\n")) ex->post([ex] { next(ex); }, 5ms);
      }
    };
    Tick::next(ex);
  });
  HttpClient c = s.client(cert.certificate_file);
  int pieces = 0;
  HttpClientRequest req;
  req.target = "/endless";
  HttpClientResult r = c.stream(req, [&](const HttpClientResult&, std::string_view) { return ++pieces < 3; });
  CHECK(r.error == HttpClientError::cancelled);
  CHECK(eventually([&] { return gone.load(); }));
}

TEST_CASE("tls: certificate files that cannot serve are refused naming the file", "[http][tls]") {
  TempDir dir;
  const auto a = make_test_certificate(dir.path.string(), "a");
  const auto b = make_test_certificate(dir.path.string(), "b");
  CHECK_THROWS_WITH(load_server_tls(dir.file("none.crt"), a.private_key_file), Contains("TLS certificate " + dir.file("none.crt")));
  CHECK_THROWS_WITH(load_server_tls(a.certificate_file, dir.file("none.key")), Contains("TLS private key " + dir.file("none.key")));
  CHECK_THROWS_WITH(load_server_tls(a.certificate_file, b.private_key_file),
                    Contains("TLS private key " + b.private_key_file + " is not the key of the certificate in " + a.certificate_file));
  const std::string junk = "not a certificate\n";
  write_file(dir.file("junk.crt"), reinterpret_cast<const uint8_t*>(junk.data()), junk.size());
  CHECK_THROWS_WITH(load_server_tls(dir.file("junk.crt"), a.private_key_file), Contains("expected a readable PEM certificate chain"));
  CHECK_NOTHROW(load_server_tls(a.certificate_file, a.private_key_file));
}

}  // namespace http_tls_tests
