#include "http/http_tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl.hpp>

namespace tokenhost {
namespace {

namespace ssl = boost::asio::ssl;

// OpenSSL's reason for the last failure on this thread, its queue emptied.
std::string openssl_reason(const boost::system::error_code& ec) {
  std::string out = tls_error_text(ec);
  ERR_clear_error();
  return out;
}

std::shared_ptr<TlsContext> new_context(ssl::context::method method) {
  auto ctx = std::make_shared<ssl::context>(method);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  // Renegotiation lets a client make the server redo the costliest step of a handshake at will.
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  return ctx;
}

}  // namespace

std::string tls_error_text(const boost::system::error_code& ec) {
  if (ec.category() != boost::asio::error::get_ssl_category()) return ec.message();
  const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()));
  std::string out = reason != nullptr ? reason : ec.message();
  return out;
}

bool tls_got_plain_http(const boost::system::error_code& ec) {
  return ec.category() == boost::asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST;
}

std::shared_ptr<TlsContext> load_server_tls(const std::string& certificate_file, const std::string& private_key_file) {
  auto ctx = new_context(ssl::context::tls_server);
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(certificate_file, ec);
  if (ec)
    throw std::runtime_error("TLS certificate " + certificate_file + ": " + openssl_reason(ec) +
                             " (expected a readable PEM certificate chain, the server's certificate first)");
  ctx->use_private_key_file(private_key_file, ssl::context::pem, ec);
  if (ec) {
    // A key that is not the certificate's is said below, in words that name both files.
    const bool mismatch = ec.category() == boost::asio::error::get_ssl_category() &&
                          ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH;
    if (!mismatch)
      throw std::runtime_error("TLS private key " + private_key_file + ": " + openssl_reason(ec) +
                               " (expected a readable, unencrypted PEM private key)");
    ERR_clear_error();
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    throw std::runtime_error("TLS private key " + private_key_file + " is not the key of the certificate in " + certificate_file);
  }
  return ctx;
}

std::shared_ptr<TlsContext> make_client_tls(const std::string& ca_file, bool verify) {
  auto ctx = new_context(ssl::context::tls_client);
  boost::system::error_code ec;
  ctx->set_verify_mode(verify ? ssl::verify_peer : ssl::verify_none, ec);
  if (!ca_file.empty()) {
    ctx->load_verify_file(ca_file, ec);
    if (ec) throw std::runtime_error("CA file " + ca_file + ": " + openssl_reason(ec) + " (expected readable PEM certificates)");
  } else if (verify) {
    ctx->set_default_verify_paths(ec);
    if (ec) throw std::runtime_error("the system's CA certificates cannot be read: " + openssl_reason(ec));
  }
  return ctx;
}

}  // namespace tokenhost
