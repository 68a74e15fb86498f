#include "http/http_client.hpp"

#include <strings.h>
#include <sys/socket.h>

#include <cerrno>
#include <optional>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "http/http_tls.hpp"

namespace tokenhost {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

constexpr uint32_t kHeaderLimit = 64 << 10;
constexpr size_t kStreamPiece = 64 << 10;  // the most one sink call gets

std::string duration_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s" : std::to_string(d.count()) + " ms";
}

// How a connection the server has closed while it idled shows itself on the next request.
bool closed_by_peer(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == net::ssl::error::stream_truncated;
}

HttpClientResult failure(HttpClientError error, std::string message, HttpClientResult head = {}) {
  head.error = error;
  head.message = std::move(message);
  return head;
}

}  // namespace

std::string HttpClientResult::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), name.size()) == 0) return v;
  return {};
}

struct HttpClient::Impl {
  Impl(std::string h, int p, HttpClientOptions o)
      : host(std::move(h)), port(p), options(std::move(o)), url((options.tls.enabled ? "https://" : "http://") + authority()) {}

  std::string host;
  int port;
  HttpClientOptions options;
  std::string url;
  // Every operation runs on this context, on the caller's thread, one at a time: synchronous calls
  // with the deadlines of Beast's asynchronous stream.
  net::io_context io;
  // One of them engaged while connected: plain, or TLS (its context made for the first connection).
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  std::shared_ptr<TlsContext> tls_context;
  beast::flat_buffer buffer;
  std::vector<char> piece;  // a streamed body's landing place

  std::string authority() const {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }

  // Starts an asynchronous operation with a completion handler and runs the context until it is done.
  template <class Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
  }

  bool connected() const { return plain || secure; }
  // The TCP stream beneath: deadlines and the socket.
  beast::tcp_stream& tcp_layer() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  // Runs op(stream) on the connection's stream, whichever it is.
  template <class Op>
  beast::error_code on_stream(Op&& op) {
    return secure ? op(*secure) : op(*plain);
  }

  // Without TLS's closing alert: a request is framed by its headers, and the server may be gone.
  void close() {
    if (!connected()) return;
    beast::error_code ignored;
    tcp_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp_layer().close();
    plain.reset();
    secure.reset();
    buffer.clear();
  }

  // Whether a kept connection is still open: the server closes idle ones, and a request sent on one of
  // those would be lost. Bytes waiting before a request is sent belong to no answer: not usable either.
  bool usable() {
    if (!connected() || buffer.size() > 0) return false;
    char c;
    const ssize_t n = ::recv(tcp_layer().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  HttpClientResult connect() {
    close();
    beast::error_code ec;
    const auto address = net::ip::make_address(host, ec);
    const bool numeric = !ec;
    tcp::resolver::results_type endpoints;
    if (!numeric) {
      // A name: the system resolver, with its own timeouts (Asio cannot abandon a lookup under way).
      tcp::resolver resolver(io);
      endpoints = resolver.resolve(host, std::to_string(port), ec);
      if (ec) return failure(HttpClientError::resolve, "cannot resolve the host of " + url + ": " + ec.message());
    }
    if (options.tls.enabled) {
      if (!tls_context) {
        try {
          tls_context = make_client_tls(options.tls.ca_file, options.tls.verify);
        } catch (const std::exception& e) {
          return failure(HttpClientError::tls, "cannot connect to " + url + ": " + e.what());
        }
      }
      secure.emplace(io, *tls_context);
    } else {
      plain.emplace(io);
    }
    tcp_layer().expires_after(options.connect_timeout);
    if (numeric)
      ec = run([&](auto done) { tcp_layer().async_connect(tcp::endpoint(address, uint16_t(port)), std::move(done)); });
    else
      ec = run([&](auto done) { tcp_layer().async_connect(endpoints, std::move(done)); });
    if (ec) {
      close();
      if (ec == beast::error::timeout)
        return failure(HttpClientError::connect_timeout,
                       "cannot connect to " + url + ": no answer within " + duration_text(options.connect_timeout));
      if (ec == net::error::connection_refused)
        return failure(HttpClientError::refused, "cannot connect to " + url + ": connection refused");
      return failure(HttpClientError::connect, "cannot connect to " + url + ": " + ec.message());
    }
    tcp_layer().expires_never();
    tcp_layer().socket().set_option(tcp::no_delay(true), ec);  // a request goes out at once, not after Nagle's wait
    if (secure) return handshake(numeric);
    return {};
  }

  // TLS: the server's name for its certificate (SNI), the certificate checked against the host, the
  // handshake within connect_timeout.
  HttpClientResult handshake(bool numeric) {
    if (!numeric) SSL_set_tlsext_host_name(secure->native_handle(), host.c_str());
    if (options.tls.verify) secure->set_verify_callback(ssl::host_name_verification(host));
    tcp_layer().expires_after(options.connect_timeout);
    const beast::error_code ec = run([&](auto done) { secure->async_handshake(ssl::stream_base::client, std::move(done)); });
    tcp_layer().expires_never();
    if (!ec) return {};
    std::string why = ec == beast::error::timeout ? "no answer within " + duration_text(options.connect_timeout) : tls_error_text(ec);
    if (const long verified = SSL_get_verify_result(secure->native_handle()); verified != X509_V_OK)
      why += " (" + std::string(X509_verify_cert_error_string(verified)) + ")";
    close();
    return failure(HttpClientError::tls, "TLS handshake with " + url + " failed: " + why);
  }

  beast::error_code write(const HttpClientRequest& r) {
    http::request<http::string_body> req;
    req.method_string(r.method);
    req.target(r.target);
    req.version(11);
    req.set(http::field::host, authority());
    req.set(http::field::user_agent, "tokenhost");
    for (const auto& [k, v] : options.headers) req.insert(k, v);
    for (const auto& [k, v] : r.headers) req.insert(k, v);
    if (!r.content_type.empty()) req.set(http::field::content_type, r.content_type);
    req.body() = r.body;
    req.prepare_payload();
    tcp_layer().expires_after(options.write_timeout);
    const beast::error_code ec = on_stream([&](auto& s) { return run([&](auto done) { http::async_write(s, req, std::move(done)); }); });
    tcp_layer().expires_never();
    return ec;
  }

  // One read from the socket into the parser, within read_timeout.
  template <class Parser>
  beast::error_code read_some(Parser& p) {
    tcp_layer().expires_after(options.read_timeout);
    beast::error_code ec =
        on_stream([&](auto& s) { return run([&](auto done) { http::async_read_some(s, buffer, p, std::move(done)); }); });
    tcp_layer().expires_never();
    if (ec == http::error::need_buffer) ec = {};  // a streamed piece is full: hand it over, read on
    return ec;
  }

  template <class Parser>
  static void take_head(const Parser& p, HttpClientResult& out) {
    const auto& m = p.get();
    out.status = int(m.result_int());
    out.reason = std::string(m.reason());
    out.headers.clear();
    for (const auto& f : m) out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }

  // The result of a failed read; `stale` when it is the server having closed a kept connection before
  // this request reached it (nothing of an answer came): the request may be sent again on a new one.
  template <class Parser>
  HttpClientResult read_failed(beast::error_code ec, const Parser& p, const std::string& what, HttpClientResult out,
                               bool reused, bool& stale) {
    close();
    stale = reused && !p.got_some() && closed_by_peer(ec);
    if (ec == beast::error::timeout)
      return failure(HttpClientError::read_timeout,
                     "reading the answer to " + what + " timed out (nothing for " + duration_text(options.read_timeout) + ")",
                     std::move(out));
    if (ec == http::error::body_limit)
      return failure(HttpClientError::too_large,
                     "the answer to " + what + " is larger than the limit of " + std::to_string(options.max_body_bytes) + " bytes",
                     std::move(out));
    std::string why = ec.message();
    if (closed_by_peer(ec) || ec == http::error::partial_message) why = "the server closed the connection";
    if (ec == http::error::header_limit) why = "its headers are larger than " + std::to_string(kHeaderLimit) + " bytes";
    return failure(HttpClientError::read, "reading the answer to " + what + " failed: " + why, std::move(out));
  }

  HttpClientResult whole(const HttpClientRequest& r, bool reused, bool& stale) {
    const std::string what = r.method + " " + url + r.target;
    http::response_parser<http::string_body> p;
    p.header_limit(kHeaderLimit);
    p.body_limit(options.max_body_bytes);
    p.skip(r.method == "HEAD");
    HttpClientResult out;
    while (!p.is_done()) {
      const beast::error_code ec = read_some(p);
      if (p.is_header_done() && out.status == 0) take_head(p, out);
      if (ec) return read_failed(ec, p, what, std::move(out), reused, stale);
    }
    out.body = std::move(p.get().body());
    if (!p.keep_alive()) close();
    return out;
  }

  HttpClientResult streamed(const HttpClientRequest& r, const StreamSink& sink, bool reused, bool& stale) {
    const std::string what = r.method + " " + url + r.target;
    http::response_parser<http::buffer_body> p;
    p.header_limit(kHeaderLimit);
    p.body_limit(boost::none);  // the sink decides how much it wants
    p.skip(r.method == "HEAD");
    piece.resize(kStreamPiece);
    HttpClientResult out;
    while (!p.is_done()) {
      p.get().body().data = piece.data();
      p.get().body().size = piece.size();
      const beast::error_code ec = read_some(p);
      if (p.is_header_done() && out.status == 0) take_head(p, out);
      if (ec) return read_failed(ec, p, what, std::move(out), reused, stale);
      const size_t n = piece.size() - p.get().body().size;
      if (n > 0 && !sink(out, std::string_view(piece.data(), n))) {
        close();  // the rest of the answer would otherwise have to be read before the next request
        return failure(HttpClientError::cancelled, "reading the answer to " + what + " was cancelled", std::move(out));
      }
    }
    if (!p.keep_alive()) close();
    return out;
  }

  HttpClientResult exchange(const HttpClientRequest& r, const StreamSink* sink) {
    // A kept connection the server closed just as the request went out fails without an answer: the
    // request is sent once more, on a new connection (never twice on new ones).
    for (int attempt = 0;; ++attempt) {
      const bool reused = usable();
      if (!reused) {
        if (HttpClientResult failed = connect(); !failed.ok()) return failed;
      }
      if (const beast::error_code ec = write(r)) {
        close();
        if (reused && attempt == 0 && closed_by_peer(ec)) continue;
        return failure(HttpClientError::write, "sending " + r.method + " " + url + r.target + " failed: " + ec.message());
      }
      bool stale = false;
      HttpClientResult result = sink ? streamed(r, *sink, reused, stale) : whole(r, reused, stale);
      if (stale && attempt == 0) continue;
      return result;
    }
  }
};

HttpClient::HttpClient(std::string host, int port, HttpClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(options))) {}
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;

HttpClientResult HttpClient::request(const HttpClientRequest& request) { return impl_->exchange(request, nullptr); }

HttpClientResult HttpClient::request(std::string method, std::string target, std::string body, std::string content_type) {
  HttpClientRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return impl_->exchange(r, nullptr);
}

HttpClientResult HttpClient::stream(const HttpClientRequest& request, const StreamSink& sink) {
  return impl_->exchange(request, &sink);
}

void HttpClient::close() { impl_->close(); }
HttpClientOptions& HttpClient::options() { return impl_->options; }
const std::string& HttpClient::url() const { return impl_->url; }

}  // namespace tokenhost
