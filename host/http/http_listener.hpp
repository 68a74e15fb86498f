// An asynchronous HTTP/1.1 server on one address (Boost.Beast over Asio): a handful of I/O threads
// serve every connection, each connection a small state machine with deadlines, so that slow or
// hostile clients cost memory, not threads.
//
// Per connection: a request's headers must arrive within header_timeout of its first byte, its body
// within body_timeout, and an idle keep-alive connection is closed after idle_timeout. Bodies are
// limited while they are read (chunked ones too: 413); a request with both Content-Length and
// Transfer-Encoding is refused (400); past max_connections a new connection is answered 503 and
// closed. A handler answers through an HttpExchange, at once or later, whole or as a stream; a
// stream's unsent bytes are bounded (a slow reader never blocks the writer: past the bound the
// write is refused and the handler cancels its work). A client that closes its connection while its
// request is being worked on is seen by the socket itself (on_gone).
//
// With use_tls, the listener speaks HTTPS: each connection's TLS handshake must complete within
// header_timeout; a plain HTTP request sent to it is answered 400 in plain HTTP, naming https.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "http/http_message.hpp"

namespace boost::asio::ssl {
class context;
}

namespace tokenhost {

// One request being answered. Thread-safe: a handler may answer from any thread.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest& request() const = 0;
  // The whole answer. Once per exchange, or not at all after start_stream().
  virtual void reply(HttpResponse response) = 0;
  // Starts a chunked answer with head's status and headers (its body is ignored).
  virtual void start_stream(HttpResponse head) = 0;
  // Queues part of a streamed body. False when the client is gone, or when the bytes not yet sent
  // would pass the listener's stream_buffer_bytes (the exchange is then closed): stop producing.
  virtual bool write(std::string chunk) = 0;
  // Ends a streamed body; the connection then serves its next request.
  virtual void end_stream() = 0;
  // fn runs once if the client goes away (closes or resets its connection, or a write fails) before
  // the answer is complete; at once if it already has. On an I/O thread: do not block in it.
  virtual void on_gone(std::function<void()> fn) = 0;
  virtual bool gone() const = 0;
  // Runs fn on the connection's strand (serialized with this exchange's other posted work and
  // timers), after `delay` when given.
  virtual void post(std::function<void()> fn, std::chrono::milliseconds delay = std::chrono::milliseconds(0)) = 0;
};

struct HttpLimits {
  size_t max_body_bytes = 8 << 20;
  size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds idle_timeout{60000};
  size_t max_connections = 16384;
  size_t stream_buffer_bytes = 1 << 20;  // unsent bytes of one streamed answer
  // Paths still served past max_connections (health probes): a connection over the cap gets
  // kOverCapWait to send its request; one for these paths is answered and closed, any other 503.
  std::vector<std::string> reserved_paths;
};

class HttpListener {
 public:
  // Answers the request by filling the response; runs on the listener's handler threads (it may block).
  using BlockingHandler = std::function<void(const HttpRequest&, HttpResponse&)>;
  // Takes the exchange and answers it when ready; runs on an I/O thread: it must not block.
  using AsyncHandler = std::function<void(std::shared_ptr<HttpExchange>)>;
  // Runs before routing on the I/O thread: returns true after filling the response to answer the
  // request itself (authentication), false to route it.
  using PreRouting = std::function<bool(const HttpRequest&, HttpResponse&)>;
  // Sees every answered request (not streamed ones' bodies), on the thread that answered.
  using Logger = std::function<void(const HttpRequest&, const HttpResponse&)>;

  // name labels log lines ("gateway", "admin"); io_threads serve the sockets, handler_threads run
  // blocking handlers.
  HttpListener(std::string name, HttpLimits limits, size_t io_threads, size_t handler_threads);
  ~HttpListener();  // stops

  // Routes: the path as sent (percent-escaped) must match pattern whole (std::regex); its groups land
  // in HttpRequest::matches, decoded.
  void route(const std::string& method, const std::string& pattern, BlockingHandler handler);
  // Where an async handler starts: on the I/O thread that read the request (it must return at once), or
  // on a handler thread (it may parse and compute for a while before it returns; it must not wait
  // for its answer there either), so that no request's parsing holds an I/O thread.
  enum class StartOn { io_thread, handler_thread };
  void route_async(const std::string& method, const std::string& pattern, AsyncHandler handler,
                   StartOn start_on = StartOn::io_thread);
  void set_pre_routing(PreRouting fn);
  // HTTPS with this certificate (http/http_tls.hpp's load_server_tls), before start().
  void use_tls(std::shared_ptr<boost::asio::ssl::context> context);
  void set_logger(Logger fn);
  // Gives every request an id (HttpRequest::id, made by fn from the request's headers, before
  // pre-routing) and sends it back as X-Request-Id with its answer, a refusal's too.
  using RequestIds = std::function<std::string(const HttpRequest&)>;
  void set_request_ids(RequestIds fn);

  // Binds host:port (port 0: any free port) and returns the port. Throws std::runtime_error naming
  // the address when it cannot.
  int bind(const std::string& host, int port);
  // Serves on the bound address until stop().
  void start();
  // Stops accepting connections and waits, up to timeout, until every request taken has its answer
  // written (a stream: its end) or its client gone; idle keep-alive connections do not count. Returns
  // how many were still unanswered. Call before stop(), which drops what is still queued: answers a
  // handler gives just before shutdown then still reach their clients.
  size_t drain(std::chrono::milliseconds timeout);
  // Closes the listener and every connection, and joins the threads.
  void stop();

  // Open connections now (for tests and status).
  size_t connections() const;
  // Requests taken whose answer is not yet written (for drain, tests and status).
  size_t unanswered() const;

  struct Impl;  // http_listener.cpp's; its connections reach it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenhost
