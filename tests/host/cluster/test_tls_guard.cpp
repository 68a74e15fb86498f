// The OpenSSL error-queue guard (cluster/tls_guard.hpp): an error another connection left on
// the thread's queue no longer makes a healthy connection's read or write look failed. Two endpoints
// with certificates of one cluster talk over an in-memory BIO pair; a stale error is put on the
// queue before each operation, as a refused handshake on the same thread would leave it.
#include <catch2/catch.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "cluster/node_identity.hpp"
#include "cluster/tls_guard.hpp"
#include "files.hpp"

namespace cluster_tls_guard_tests {

using namespace tokenhost::cluster;
using tokenhost::testing::TempDir;

namespace {

struct Endpoint {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{nullptr, SSL_CTX_free};
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl{nullptr, SSL_free};
};

Endpoint endpoint(const TempDir& d, const std::string& node, bool server) {
  Endpoint e;
  e.ctx.reset(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()));
  REQUIRE(SSL_CTX_use_certificate_chain_file(e.ctx.get(), d.file(node + ".pem").c_str()) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey_file(e.ctx.get(), d.file(node + ".key").c_str(), SSL_FILETYPE_PEM) == 1);
  REQUIRE(SSL_CTX_load_verify_locations(e.ctx.get(), d.file("ca.pem").c_str(), nullptr) == 1);
  SSL_CTX_set_verify(e.ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  e.ssl.reset(SSL_new(e.ctx.get()));
  return e;
}

// What a refused handshake of another connection leaves on this thread's queue.
void stale_error() {
  ERR_raise(ERR_LIB_SSL, SSL_R_CERTIFICATE_VERIFY_FAILED);
  REQUIRE(ERR_peek_error() != 0);
}

}  // namespace

TEST_CASE("a TLS error left on the thread's queue does not fail another connection's reads and writes", "[cluster]") {
  REQUIRE(tls_guarded());
  TempDir d;
  init_cluster(d.path.string(), {"a", "b"});
  Endpoint server = endpoint(d, "a", true), client = endpoint(d, "b", false);
  BIO *server_io = nullptr, *client_io = nullptr;
  REQUIRE(BIO_new_bio_pair(&server_io, 0, &client_io, 0) == 1);
  SSL_set_bio(server.ssl.get(), server_io, server_io);
  SSL_set_bio(client.ssl.get(), client_io, client_io);

  // The handshake, driven by the wrapped calls, with a stale error before each step.
  int c = -1, s = -1;
  for (int step = 0; step < 20 && (c != 1 || s != 1); ++step) {
    if (c != 1) {
      stale_error();
      c = SSL_connect(client.ssl.get());
      if (c != 1) REQUIRE(SSL_get_error(client.ssl.get(), c) == SSL_ERROR_WANT_READ);
    }
    if (s != 1) {
      stale_error();
      s = SSL_accept(server.ssl.get());
      if (s != 1) REQUIRE(SSL_get_error(server.ssl.get(), s) == SSL_ERROR_WANT_READ);
    }
  }
  REQUIRE(c == 1);
  REQUIRE(s == 1);

  // Nothing to read yet: "try again", not a failure, despite the stale error.
  char buf[64];
  stale_error();
  int r = SSL_read(server.ssl.get(), buf, sizeof buf);
  REQUIRE(r <= 0);
  CHECK(SSL_get_error(server.ssl.get(), r) == SSL_ERROR_WANT_READ);

  const std::string message = "tokens for sequence 7";
  stale_error();
  REQUIRE(SSL_write(client.ssl.get(), message.data(), int(message.size())) == int(message.size()));
  stale_error();
  r = SSL_read(server.ssl.get(), buf, sizeof buf);
  REQUIRE(r == int(message.size()));
  CHECK(std::string(buf, size_t(r)) == message);
  ERR_clear_error();
}

}  // namespace cluster_tls_guard_tests
