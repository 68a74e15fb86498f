// TLS for the listeners and the client, through OpenSSL as Asio wraps it (boost::asio::ssl::context):
// the certificate a listener presents, the trust a client checks a server's certificate against, and
// the words an OpenSSL failure is reported in. TLS 1.2 and 1.3 only; no renegotiation.
#pragma once

#include <memory>
#include <string>

#include <boost/system/error_code.hpp>

namespace boost::asio::ssl {
class context;
}

namespace tokenhost {

using TlsContext = boost::asio::ssl::context;

// A listener's certificate and private key, loaded and checked against each other: certificate_file
// holds the PEM certificate chain (the server's own first, then its intermediates), private_key_file
// the PEM private key, unencrypted. Throws std::runtime_error naming the file at fault and OpenSSL's
// reason (missing, unreadable, not PEM, or a key that is not the certificate's).
std::shared_ptr<TlsContext> load_server_tls(const std::string& certificate_file, const std::string& private_key_file);

// A client's: with verify, a server's certificate must chain to ca_file's certificates (PEM), or to
// the system's store when ca_file is ""; without, any certificate is taken (the connection is
// encrypted, not authenticated). Throws std::runtime_error naming ca_file when it cannot be used.
std::shared_ptr<TlsContext> make_client_tls(const std::string& ca_file, bool verify);

// What went wrong, in OpenSSL's words when ec is of its category ("certificate verify failed",
// "wrong version number", ...), else ec.message().
std::string tls_error_text(const boost::system::error_code& ec);

// Whether a failed server handshake was a plain HTTP request sent to the TLS port.
bool tls_got_plain_http(const boost::system::error_code& ec);

}  // namespace tokenhost
