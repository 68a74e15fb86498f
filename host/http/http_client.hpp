// A synchronous HTTP/1.1 client for one server (Boost.Beast over Asio): what `tokenhost admin`, the
// load generator and the tests speak. One connection, kept alive between requests and opened again
// when the server has closed it; every step has a deadline (connect, send, and each wait for the
// answer's next bytes), so a silent server costs a bounded wait, never a hung caller.
//
// Failures are values, not exceptions: a result names what failed (HttpClientError) and says so in a
// sentence naming the URL. After any failure the connection is closed; the next request opens a new
// one. Not thread-safe: one client per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenhost {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// https: TLS over the connection (http/http_tls.hpp), the server's certificate checked against its
// name (or address) and trusted certificates.
struct HttpClientTls {
  bool enabled = false;
  std::string ca_file;  // PEM certificates to trust; "": the system's store
  bool verify = true;   // false: any certificate is taken (encrypted, not authenticated: --insecure)
};

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{10000};
  // The longest wait for the answer's next bytes, its first ones included. Not a bound on the whole
  // answer: a stream runs for as long as it keeps sending.
  std::chrono::milliseconds read_timeout{60000};
  std::chrono::milliseconds write_timeout{60000};  // for the whole request
  size_t max_body_bytes = 64u << 20;                // of a whole answer; a streamed body is the sink's
  HttpHeaders headers;                              // sent with every request (Authorization, ...)
  HttpClientTls tls;
};

enum class HttpClientError {
  none,
  resolve,          // the host name has no address
  refused,          // nothing listens there
  connect_timeout,  // no answer to the connection attempt within connect_timeout
  connect,          // another connection failure (unreachable network, ...)
  tls,              // the TLS handshake failed (an untrusted certificate, not a TLS server, ...), or the
                    // CA file cannot be used
  write,            // sending the request failed
  read_timeout,     // the answer's next bytes did not come within read_timeout
  read,             // the connection closed or broke mid-answer, or the answer is not HTTP
  too_large,        // the whole answer's body is larger than max_body_bytes
  cancelled,        // the stream's sink returned false
};

struct HttpClientRequest {
  std::string method = "GET";
  std::string target = "/";   // path and query, as sent
  HttpHeaders headers;        // besides the client's own, Host, Content-Length and Content-Type
  std::string body;
  std::string content_type;   // "": no Content-Type header
};

struct HttpClientResult {
  HttpClientError error = HttpClientError::none;
  std::string message;  // "" when nothing failed; else what failed, naming the URL
  int status = 0;       // 0 until a status line arrived (it is kept when the body then fails)
  std::string reason;
  HttpHeaders headers;
  std::string body;     // a whole answer's; a streamed one went to the sink

  bool ok() const { return error == HttpClientError::none; }
  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

class HttpClient {
 public:
  // Gets the head (status and headers, no body) and then each piece of the body as it arrives (one
  // socket read's worth, chunked framing removed). Returning false cancels: the connection closes and
  // the result is HttpClientError::cancelled.
  using StreamSink = std::function<bool(const HttpClientResult& head, std::string_view data)>;

  // Connects on the first request, not here. host: a name or a numeric address (IPv6 without brackets).
  HttpClient(std::string host, int port, HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;

  // The whole answer, its body up to options.max_body_bytes.
  HttpClientResult request(const HttpClientRequest& request);
  HttpClientResult request(std::string method, std::string target, std::string body = {}, std::string content_type = {});
  // The answer's body handed to sink as it arrives (server-sent events), whatever its length.
  HttpClientResult stream(const HttpClientRequest& request, const StreamSink& sink);

  // Closes the connection (the next request opens another).
  void close();
  HttpClientOptions& options();
  // "http://HOST:PORT" (https:// with TLS), as the messages name it.
  const std::string& url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenhost
