#include "http/http_listener.hpp"

#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/api_error.hpp"
#include "http/http_tls.hpp"
#include "util/steady_clock.hpp"

namespace tokenhost {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

struct Route {
  std::string method;
  std::regex pattern;
  HttpListener::BlockingHandler blocking;
  HttpListener::AsyncHandler async;
  HttpListener::StartOn start_on = HttpListener::StartOn::io_thread;  // async's
};

// What outlives the listener's I/O: exchanges held by handlers check `alive` (under the mutex) before
// they touch a connection, and stop() clears it before the I/O context goes away.
struct Liveness {
  std::mutex mutex;
  bool alive = true;
};

std::string error_json(const std::string& message, const std::string& type) {
  return api::dump_json(nlohmann::json{{"error", {{"message", message}, {"type", type}}}});
}

std::string reason_phrase(int status) {
  const auto reason = http::obsolete_reason(http::int_to_status(unsigned(status)));
  return reason.empty() ? "Status" : std::string(reason);
}

// The start line and headers of an answer, ending with the blank line.
std::string head_text(const HttpResponse& r, bool chunked, size_t content_length, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  if (!r.content_type.empty()) out += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  out += chunked ? std::string("Transfer-Encoding: chunked\r\n") : "Content-Length: " + std::to_string(content_length) + "\r\n";
  if (!keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  return out;
}

std::string chunk_text(const std::string& data) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

class Connection;

struct HttpListener::Impl {
  Impl(std::string n, HttpLimits l, size_t io, size_t handler_threads)
      : name(std::move(n)), limits(l), io_threads(std::max<size_t>(io, 1)), handlers(std::max<size_t>(handler_threads, 1)) {}

  std::string name;
  HttpLimits limits;
  size_t io_threads;
  // The cap is full: closes the connection that has waited longest for a request (a silent or idle
  // one), if any; true when one was found. Any thread.
  bool evict_longest_waiting();
  // Before the I/O context: handlers it still holds when it is destroyed (a timer posted by a
  // handler, say) release sessions, whose destructors reach these.
  std::atomic<size_t> open{0};
  std::atomic<size_t> over_cap{0};    // sessions accepted past max_connections for a reserved path
  std::atomic<size_t> unanswered{0};  // sessions whose current request's answer is not yet written
  std::mutex sessions_mutex;
  std::set<Connection*> sessions;
  std::shared_ptr<TlsContext> tls;  // null: plain HTTP
  net::io_context io;
  net::thread_pool handlers;
  tcp::acceptor acceptor{io};
  std::vector<Route> routes;
  PreRouting pre_routing;
  HttpListener::RequestIds request_ids;
  std::shared_ptr<const Logger> logger;
  std::vector<std::thread> threads;
  std::shared_ptr<Liveness> liveness = std::make_shared<Liveness>();
  std::atomic<int64_t> last_refusal_log{0};
  bool started = false, stopped = false;

  void accept();
  // A log line at most once a second for a flood of the same refusal.
  bool log_refusal_now() {
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    int64_t last = last_refusal_log.load();
    return now != last && last_refusal_log.compare_exchange_strong(last, now);
  }
};

// One request's answer, shared between the connection and the handler.
// Request bodies from this size on give their memory back once answered (~Exchange).
constexpr size_t kReturnMemoryAfterBytes = 1 << 20;
// Connections past max_connections for a reserved path (HttpLimits::reserved_paths): how long one may
// take to send its request, and how many may wait at once (beyond them, 503 at once).
constexpr std::chrono::milliseconds kOverCapWait{500};
constexpr size_t kOverCapSessions = 32;

class Exchange final : public HttpExchange {
 public:
  Exchange(std::weak_ptr<Connection> session, std::shared_ptr<Liveness> liveness, HttpRequest request, bool keep_alive,
           bool head_only, size_t stream_bound, std::shared_ptr<const HttpListener::Logger> logger)
      : session_(std::move(session)),
        liveness_(std::move(liveness)),
        request_(std::move(request)),
        keep_alive_(keep_alive),
        head_only_(head_only),
        stream_bound_(stream_bound),
        logger_(std::move(logger)) {}
  ~Exchange() override {
    // A large body, and what parsing it allocated, are gone now: hand their pages back to the system
    // (glibc keeps freed heap, and raises its mmap threshold after a large free, so that 16 parsed
    // 8 MiB bodies would otherwise stay resident).
    if (request_.body.size() >= kReturnMemoryAfterBytes) {
      std::string().swap(request_.body);
      ::malloc_trim(0);
    }
  }

  const HttpRequest& request() const override { return request_; }
  void reply(HttpResponse response) override;
  void start_stream(HttpResponse head) override;
  bool write(std::string chunk) override;
  void end_stream() override;
  void on_gone(std::function<void()> fn) override;
  bool gone() const override {
    std::lock_guard lock(mutex_);
    return gone_;
  }
  void post(std::function<void()> fn, std::chrono::milliseconds delay) override;

  // Connection side (its strand).
  void mark_gone();
  void sent(size_t bytes) {
    std::lock_guard lock(mutex_);
    unsent_ -= std::min(unsent_, bytes);
  }
  bool keep_alive() const { return keep_alive_; }

 private:
  // Runs fn(session) on the session's strand, unless the listener or the session is gone.
  void on_session(std::function<void(Connection&)> fn);

  std::weak_ptr<Connection> session_;
  std::shared_ptr<Liveness> liveness_;
  HttpRequest request_;
  const bool keep_alive_, head_only_;
  const size_t stream_bound_;
  std::shared_ptr<const HttpListener::Logger> logger_;  // null: none
  mutable std::mutex mutex_;
  bool answered_ = false, streaming_ = false, ended_ = false, gone_ = false;
  size_t unsent_ = 0;
  std::vector<std::function<void()>> gone_callbacks_;
};

// A connection as its exchanges and the listener reach it: a Session over plain TCP or over TLS.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection() = default;
  virtual net::any_io_executor executor() = 0;
  // Output: data joins the queue; `last` ends the current exchange's answer; `counted` is the streamed
  // body bytes it carries.
  virtual void enqueue(std::string data, bool last, size_t counted) = 0;
  // Closes the socket; what is queued is dropped.
  virtual void close() = 0;
  // Closes it if it still waits for a request (no request of it is being read past its headers or
  // answered): the listener makes room this way when its connection cap is full. On its strand.
  virtual void evict_if_waiting() = 0;
  // Since when (steady clock, ns) it has waited for a request; 0 while one is read or answered.
  std::atomic<uint64_t> waiting_since{0};
};

// One connection: reads requests one after another, hands each to its route, writes the answers in
// order. Every member runs on the connection's strand. Stream is beast::tcp_stream (HTTP) or an
// ssl_stream over one (HTTPS: a handshake first, within header_timeout); deadlines, the socket and the
// lingering close act on the TCP stream beneath either.
template <class Stream>
class Session final : public Connection {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  // over_cap: accepted past max_connections, for one request to a reserved path (HttpLimits).
  template <class... Args>
  Session(HttpListener::Impl& listener, bool over_cap, Args&&... stream_args)
      : l_(listener), stream_(std::forward<Args>(stream_args)...), buffer_(l_.limits.max_header_bytes + kReadAhead),
        over_cap_(over_cap) {
    if (over_cap_) ++l_.over_cap;
    ++l_.open;
    std::lock_guard lock(l_.sessions_mutex);
    l_.sessions.insert(this);
  }
  ~Session() override {
    answered();
    if (over_cap_) --l_.over_cap;
    --l_.open;
    std::lock_guard lock(l_.sessions_mutex);
    l_.sessions.erase(this);
  }

  void start() {
    waiting_since = steady_now_ns();
    beast::error_code ec;
    tcp_layer().socket().set_option(tcp::no_delay(true), ec);  // streamed tokens are small writes, each wanted at once
    const auto peer = tcp_layer().socket().remote_endpoint(ec);
    if (!ec) {
      remote_addr_ = peer.address().to_string();
      remote_port_ = peer.port();
    }
    net::dispatch(executor(), [self = self()] {
      if constexpr (kTls) {
        self->tcp_layer().expires_after(self->l_.limits.header_timeout);
        self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) { self->on_handshake(ec); });
      } else {
        self->read_header();
      }
    });
  }

  net::any_io_executor executor() override { return stream_.get_executor(); }

  void enqueue(std::string data, bool last, size_t counted) override {
    if (closed_) return;
    out_.push_back({std::move(data), last, counted});
    if (!writing_) write_next();
  }

  // The client is gone (closed, reset, or a write failed): the exchange learns it, the socket closes.
  void client_gone() {
    if (exchange_) exchange_->mark_gone();
    close();
  }

  void evict_if_waiting() override {
    if (closed_ || waiting_since.load() == 0) return;
    spdlog::debug("{}: {}:{} waited for a request while the connection cap was full: closed to make room", l_.name, remote_addr_,
                  remote_port_);
    close();
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    answered();  // or never will be: the drain stops waiting for it
    beast::error_code ec;
    tcp_layer().socket().shutdown(tcp::socket::shutdown_both, ec);
    tcp_layer().close();
    out_.clear();
    keep_.reset();  // the last pending operation's handler now holds the only reference
  }

  void dispatch(HttpRequest request, bool keep_alive, bool head_only);

 private:
  // The request taken by dispatch() has its whole answer written (or the connection closed).
  void answered() {
    if (!unanswered_) return;
    unanswered_ = false;
    --l_.unanswered;
  }

  struct Piece {
    std::string data;
    bool last;
    size_t counted;  // streamed body bytes this piece carries (the exchange's unsent count)
  };

  // The next request: wait up to idle_timeout for its first byte, then header_timeout for the rest
  // of its headers.
  void read_next() {
    exchange_.reset();
    keep_.reset();
    waiting_since = steady_now_ns();
    if (buffer_.size() > 0) return read_header();
    tcp_layer().expires_after(l_.limits.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = self()](beast::error_code ec, size_t n) {
      if (ec) return self->close();  // idle too long, or the client closed: nothing is lost
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    if (waiting_since.load() == 0) waiting_since = steady_now_ns();
    parser_.emplace();
    parser_->header_limit(uint32_t(l_.limits.max_header_bytes));
    parser_->body_limit(l_.limits.max_body_bytes);
    parser_->on_chunk_header(bound_trailer_);
    tcp_layer().expires_after(over_cap_ ? std::min(l_.limits.header_timeout, kOverCapWait) : l_.limits.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  void on_header(beast::error_code ec) {
    if (ec == beast::error::timeout) {
      spdlog::debug("{}: {}:{} did not complete its request headers within {} ms: closed", l_.name, remote_addr_,
                    remote_port_, l_.limits.header_timeout.count());
      return close();
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted)
      return close();
    if (ec == http::error::body_limit)  // a declared Content-Length past the limit
      return refuse(413, "the request body is larger than the limit of " + std::to_string(l_.limits.max_body_bytes) + " bytes");
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
      return refuse(431, "the request headers are larger than the limit of " + std::to_string(l_.limits.max_header_bytes) + " bytes");
    if (ec) return refuse(400, "malformed HTTP request: " + ec.message());
    waiting_since = 0;  // a request is being read: not evicted for room
    const auto& req = parser_->get();
    if (over_cap_) {
      const std::string_view target = req.target();
      const std::string path(target.substr(0, target.find('?')));
      const auto& reserved = l_.limits.reserved_paths;
      if (std::find(reserved.begin(), reserved.end(), path) == reserved.end())
        return refuse(503, "too many open connections (" + std::to_string(l_.limits.max_connections) + "); retry later");
    }
    if (req.find(http::field::content_length) != req.end() && req.find(http::field::transfer_encoding) != req.end())
      return refuse(400, "the request has both Content-Length and Transfer-Encoding; send one");
    // A request's Transfer-Encoding must end in chunked, else its body's length is unknowable (RFC 9112
    // 6.3): Beast reads such a request as bodiless, and the bytes after it as the next request.
    if (req.find(http::field::transfer_encoding) != req.end() && !parser_->chunked())
      return refuse(400, "malformed HTTP request: bad Transfer-Encoding '" + std::string(req[http::field::transfer_encoding]) +
                             "' (a request's must end with chunked)");
    if (auto length = parser_->content_length(); length && *length > l_.limits.max_body_bytes)
      return refuse(413, "the request body (" + std::to_string(*length) + " bytes) is larger than the limit of " +
                             std::to_string(l_.limits.max_body_bytes) + " bytes");
    const auto expect = req[http::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      auto text = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      tcp_layer().expires_after(l_.limits.body_timeout);
      net::async_write(stream_, net::buffer(*text), [self = self(), text](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    tcp_layer().expires_after(l_.limits.body_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (ec == http::error::body_limit)
      return refuse(413, "the request body is larger than the limit of " + std::to_string(l_.limits.max_body_bytes) + " bytes");
    // A chunked body's trailer fields (bound_trailer_), or a last-chunk line that never ends.
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
      return refuse(431, "the request's chunked body has a chunk line or trailer larger than the header limit of " +
                             std::to_string(l_.limits.max_header_bytes) + " bytes");
    if (ec == beast::error::timeout) {
      spdlog::debug("{}: {}:{} did not send its request body within {} ms: closed", l_.name, remote_addr_, remote_port_,
                    l_.limits.body_timeout.count());
      return close();
    }
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted)
      return close();
    if (ec) return refuse(400, "malformed HTTP request: " + ec.message());
    tcp_layer().expires_never();
    auto msg = parser_->release();
    parser_.reset();
    HttpRequest r;
    r.method = std::string(msg.method_string());
    const std::string_view target = msg.target();
    const size_t q = target.find('?');
    raw_path_ = std::string(target.substr(0, q));
    r.path = percent_decode(raw_path_, false);
    if (q != std::string_view::npos) r.query = parse_query(target.substr(q + 1));
    for (const auto& f : msg) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    r.body = std::move(msg.body());
    r.remote_addr = remote_addr_;
    r.remote_port = remote_port_;
    if (l_.request_ids) r.id = l_.request_ids(r);
    const bool head_only = msg.method() == http::verb::head;
    if (head_only) r.method = "GET";
    dispatch(std::move(r), msg.keep_alive(), head_only);
  }

  // An answer from the listener itself to a request it cannot take; the connection then closes.
  void refuse(int status, const std::string& message) {
    if (l_.log_refusal_now())
      spdlog::warn("{}: refused a request from {}:{} ({}): {}", l_.name, remote_addr_, remote_port_, status, message);
    HttpResponse r;
    r.status = status;
    r.set_content(error_json(message, "invalid_request_error"), "application/json");
    parser_.reset();
    enqueue(head_text(r, false, r.body.size(), false) + r.body, true, 0);
    refusing_ = true;
  }

  // After a refusal the client may still be sending its body: stop writing, read and discard what comes
  // for up to kLinger (nothing is kept), then close, so that it reads the answer instead of a reset
  // connection.
  void linger_close() {
    beast::error_code ec;
    tcp_layer().socket().shutdown(tcp::socket::shutdown_send, ec);
    linger_until_ = std::chrono::steady_clock::now() + kLinger;
    drain();
  }

  void drain() {
    const auto left = linger_until_ - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return close();
    tcp_layer().expires_after(std::chrono::duration_cast<std::chrono::milliseconds>(left));
    buffer_.clear();  // what the client still sends is discarded, never committed
    tcp_layer().async_read_some(buffer_.prepare(buffer_.max_size()), [self = self()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  // Watches the socket while the exchange is worked on: readable with nothing to read means the
  // client closed its side (or reset the connection).
  void watch_gone() {
    tcp_layer().socket().async_wait(tcp::socket::wait_read, [self = self(), ex = exchange_](beast::error_code ec) {
      if (ec || self->closed_ || self->exchange_ != ex || ex == nullptr) return;
      char c;
      const ssize_t n = ::recv(self->tcp_layer().socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return self->client_gone();
      if (n < 0) return self->watch_gone();
      // Bytes of a pipelined request (they wait in the socket until this answer is written), or with
      // TLS an alert that may precede the client's close.
      self->poll_gone(ex);
    });
  }

  void write_next() {
    if (out_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    // A client that reads nothing for idle_timeout while an answer waits is dropped.
    tcp_layer().expires_after(l_.limits.idle_timeout);
    net::async_write(stream_, net::buffer(out_.front().data), [self = self()](beast::error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->client_gone();
      self->tcp_layer().expires_never();
      Piece done = std::move(self->out_.front());
      self->out_.pop_front();
      if (done.counted > 0 && self->exchange_) self->exchange_->sent(done.counted);
      if (done.data.size() >= kReturnMemoryAfterBytes) {  // a large answer: its pages go back, as a large body's do
        std::string().swap(done.data);
        ::malloc_trim(0);
      }
      if (!done.last) return self->write_next();
      self->writing_ = false;
      self->answered();
      const bool keep_alive = !self->refusing_ && !self->over_cap_ && self->exchange_ && self->exchange_->keep_alive();
      // A refused request's client may still be sending: linger, except past the cap (a slot of few).
      if (!keep_alive) return self->refusing_ && !self->over_cap_ ? self->linger_close() : self->close();
      self->read_next();
    });
  }

  std::shared_ptr<Session> self() { return std::static_pointer_cast<Session>(this->shared_from_this()); }
  beast::tcp_stream& tcp_layer() { return beast::get_lowest_layer(stream_); }

  // HTTPS: the handshake is done (read the first request), or it failed: a plain HTTP request on this
  // port is told so in plain HTTP, as nginx does; anything else closes the connection.
  void on_handshake(beast::error_code ec) {
    if (!ec) return read_header();
    if (tls_got_plain_http(ec)) {
      HttpResponse r;
      r.status = 400;
      r.set_content(error_json("this port speaks HTTPS: send the request with https://", "invalid_request_error"),
                    "application/json");
      auto text = std::make_shared<std::string>(head_text(r, false, r.body.size(), false) + r.body);
      tcp_layer().expires_after(l_.limits.header_timeout);
      net::async_write(tcp_layer(), net::buffer(*text), [self = self(), text](beast::error_code, size_t) { self->linger_close(); });
      return;
    }
    if (ec == beast::error::timeout)
      spdlog::debug("{}: {}:{} did not complete its TLS handshake within {} ms: closed", l_.name, remote_addr_, remote_port_,
                    l_.limits.header_timeout.count());
    else if (l_.log_refusal_now())
      spdlog::info("{}: TLS handshake with {}:{} failed: {}", l_.name, remote_addr_, remote_port_, tls_error_text(ec));
    close();
  }

  // Whether the client has closed its side of the connection, from the TCP state alone (unread bytes
  // before its FIN hide the end of stream from a read).
  bool peer_closed() {
    tcp_info info{};
    socklen_t size = sizeof info;
    if (::getsockopt(tcp_layer().socket().native_handle(), IPPROTO_TCP, TCP_INFO, &info, &size) != 0) return true;
    return info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_LAST_ACK || info.tcpi_state == TCP_CLOSE;
  }

  // Bytes wait unread while the exchange is worked on (a pipelined request, or with TLS a closing
  // alert): look at the TCP state every kGonePoll until the exchange ends.
  void poll_gone(const std::shared_ptr<Exchange>& ex) {
    auto timer = std::make_shared<net::steady_timer>(executor(), kGonePoll);
    timer->async_wait([self = self(), ex, timer](beast::error_code ec) {
      if (ec || self->closed_ || self->exchange_ != ex) return;
      if (self->peer_closed()) return self->client_gone();
      self->poll_gone(ex);
    });
  }

  // The last chunk of a chunked body (size 0) comes with the trailer's fields, which Beast's parser
  // neither counts against its header limit nor bounds (a field value past 64 KiB throws from inside
  // the parser). Beast calls this once the whole trailer is in buffer_, before it parses the fields,
  // with the last-chunk line's extensions: a view into buffer_ that ends where that line's CRLF begins.
  // The trailer runs from there to its first empty line; past max_header_bytes: header_limit, a 431.
  std::function<void(uint64_t, beast::string_view, beast::error_code&)> bound_trailer_ =
      [this](uint64_t size, beast::string_view extensions, beast::error_code& ec) {
        if (size != 0) return;
        const auto data = buffer_.cdata();
        const auto begin = reinterpret_cast<uintptr_t>(data.data()), end = begin + data.size();
        const auto line_end = reinterpret_cast<uintptr_t>(extensions.data()) + extensions.size();
        if (line_end < begin || line_end > end) return;  // not a view into the buffer: Beast parses as before
        const std::string_view rest(static_cast<const char*>(data.data()) + (line_end - begin), end - line_end);
        const size_t trailer = rest.find("\r\n\r\n");
        if (trailer == std::string_view::npos || trailer > l_.limits.max_header_bytes) ec = http::error::header_limit;
      };

  HttpListener::Impl& l_;
  Stream stream_;
  // Holds a request's headers, a chunked body's trailer and what was read ahead of them (pipelined
  // requests, body bytes the parser takes next): bounded, so that no part Beast keeps whole until it
  // ends (a header, a trailer, a chunk's extensions) grows past the limits (buffer_overflow: a 431).
  static constexpr size_t kReadAhead = 64 << 10;
  beast::flat_buffer buffer_;
  const bool over_cap_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<Exchange> exchange_;
  std::shared_ptr<Connection> keep_;  // while a handler holds the exchange, the connection lives
  std::deque<Piece> out_;
  bool writing_ = false, closed_ = false, refusing_ = false;
  bool unanswered_ = false;  // counted in l_.unanswered
  static constexpr std::chrono::seconds kLinger{5};
  static constexpr std::chrono::milliseconds kGonePoll{200};
  std::chrono::steady_clock::time_point linger_until_;
  std::string remote_addr_;
  int remote_port_ = 0;
  std::string raw_path_;  // the current request's path as sent (percent-escaped)
};

template <class Stream>
void Session<Stream>::dispatch(HttpRequest request, bool keep_alive, bool head_only) {
  const Route* route = nullptr;
  for (const auto& r : l_.routes) {
    if (r.method != request.method) continue;
    // Matched as sent, groups decoded after: an escaped '/' inside a name stays inside its group.
    std::smatch m;
    if (!std::regex_match(raw_path_, m, r.pattern)) continue;
    for (const auto& g : m) request.matches.push_back(percent_decode(g.str(), false));
    route = &r;
    break;
  }
  exchange_ = std::make_shared<Exchange>(weak_from_this(), l_.liveness, std::move(request), keep_alive, head_only,
                                         l_.limits.stream_buffer_bytes, l_.logger);
  if (!unanswered_) {
    unanswered_ = true;
    ++l_.unanswered;
  }
  keep_ = this->shared_from_this();
  std::shared_ptr<Exchange> ex = exchange_;
  const HttpRequest& req = ex->request();
  if (l_.pre_routing) {
    HttpResponse res;
    if (l_.pre_routing(req, res)) return ex->reply(std::move(res));
  }
  if (route == nullptr) {
    HttpResponse res;
    res.status = 404;
    res.set_content(error_json("no route " + req.method + " " + req.path, "invalid_request_error"), "application/json");
    return ex->reply(std::move(res));
  }
  watch_gone();
  auto failed = [ex](const char* what) {
    spdlog::error("HTTP handler failed: {}", what);
    HttpResponse res;
    res.status = 500;
    res.set_content(error_json(what, "internal_error"), "application/json");
    ex->reply(std::move(res));
  };
  if (route->blocking) {
    net::post(l_.handlers, [ex, handler = route->blocking, failed] {
      HttpResponse res;
      try {
        handler(ex->request(), res);
      } catch (const std::exception& e) {
        return failed(e.what());
      } catch (...) {
        return failed("internal error");
      }
      ex->reply(std::move(res));
    });
    return;
  }
  auto start = [ex, handler = route->async, failed] {
    try {
      handler(ex);
    } catch (const std::exception& e) {
      failed(e.what());
    } catch (...) {
      failed("internal error");
    }
  };
  if (route->start_on == HttpListener::StartOn::handler_thread) return net::post(l_.handlers, std::move(start));
  start();
}

void Exchange::on_session(std::function<void(Connection&)> fn) {
  std::lock_guard alive(liveness_->mutex);
  if (!liveness_->alive) return;
  auto s = session_.lock();
  if (!s) return;
  net::post(s->executor(), [s, fn = std::move(fn)] { fn(*s); });
}

void Exchange::reply(HttpResponse response) {
  {
    std::lock_guard lock(mutex_);
    if (answered_ || gone_) return;
    answered_ = ended_ = true;
  }
  if (!request_.id.empty()) response.set_header("X-Request-Id", request_.id);
  if (logger_) (*logger_)(request_, response);
  std::string text = head_text(response, false, response.body.size(), keep_alive_);
  if (!head_only_) text += response.body;
  on_session([text = std::move(text)](Connection& s) mutable { s.enqueue(std::move(text), true, 0); });
}

void Exchange::start_stream(HttpResponse head) {
  {
    std::lock_guard lock(mutex_);
    if (answered_ || gone_) return;
    answered_ = streaming_ = true;
  }
  if (!request_.id.empty()) head.set_header("X-Request-Id", request_.id);
  on_session([text = head_text(head, true, 0, keep_alive_)](Connection& s) mutable { s.enqueue(std::move(text), false, 0); });
}

bool Exchange::write(std::string chunk) {
  if (chunk.empty()) return !gone();
  {
    std::lock_guard lock(mutex_);
    if (!streaming_ || ended_ || gone_) return false;
    if (unsent_ + chunk.size() > stream_bound_) {
      spdlog::warn("client {}:{} reads too slowly: {} bytes of its stream are unsent (limit {}); request cancelled",
                   request_.remote_addr, request_.remote_port, unsent_ + chunk.size(), stream_bound_);
      gone_ = true;
      on_session([](Connection& s) { s.close(); });
      return false;
    }
    unsent_ += chunk.size();
  }
  const size_t counted = chunk.size();
  on_session([text = chunk_text(chunk), counted](Connection& s) mutable { s.enqueue(std::move(text), false, counted); });
  return true;
}

void Exchange::end_stream() {
  {
    std::lock_guard lock(mutex_);
    if (!streaming_ || ended_ || gone_) return;
    ended_ = true;
  }
  on_session([](Connection& s) { s.enqueue("0\r\n\r\n", true, 0); });
}

void Exchange::on_gone(std::function<void()> fn) {
  {
    std::lock_guard lock(mutex_);
    if (!gone_) {
      gone_callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void Exchange::mark_gone() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (ended_ && !streaming_) return;  // the whole answer was already given
    gone_ = true;
    callbacks.swap(gone_callbacks_);
  }
  for (auto& fn : callbacks) fn();
}

void Exchange::post(std::function<void()> fn, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) return on_session([fn = std::move(fn)](Connection&) { fn(); });
  on_session([fn = std::move(fn), delay](Connection& s) mutable {
    auto timer = std::make_shared<net::steady_timer>(s.executor(), delay);
    timer->async_wait([timer, fn = std::move(fn), keep = s.shared_from_this()](beast::error_code ec) {
      if (!ec) fn();
    });
  });
}

void HttpListener::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) and the like: say so, breathe, and accept again.
      if (log_refusal_now()) spdlog::warn("{}: cannot accept a connection: {}", name, ec.message());
      auto timer = std::make_shared<net::steady_timer>(io, 50ms);
      timer->async_wait([this, timer](beast::error_code) { accept(); });
      return;
    }
    bool full = open.load() >= limits.max_connections;
    if (full && evict_longest_waiting()) full = false;  // its room is this one's (the count drops once it closes)
    // Past the cap, a health probe still gets through: its request is read briefly (kOverCapWait).
    const bool over_cap_session = full && !limits.reserved_paths.empty() && over_cap.load() < kOverCapSessions;
    if (full && !over_cap_session) {
      if (log_refusal_now())
        spdlog::warn("{}: {} connections open, the limit: a new one is refused with 503", name, limits.max_connections);
      HttpResponse r;
      r.status = 503;
      r.set_header("Retry-After", "1");
      r.set_content(error_json("too many open connections (" + std::to_string(limits.max_connections) + "); retry later",
                               "service_unavailable"),
                    "application/json");
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      auto text = std::make_shared<std::string>(head_text(r, false, r.body.size(), false) + r.body);
      net::async_write(*s, net::buffer(*text), [s, text](beast::error_code, size_t) {
        beast::error_code ignored;
        s->shutdown(tcp::socket::shutdown_both, ignored);
      });
    } else if (tls) {
      std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(*this, over_cap_session, std::move(socket), *tls)->start();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(*this, over_cap_session, std::move(socket))->start();
    }
    accept();
  });
}

bool HttpListener::Impl::evict_longest_waiting() {
  std::shared_ptr<Connection> oldest;
  {
    std::lock_guard lock(sessions_mutex);
    uint64_t since = 0;
    for (Connection* c : sessions) {
      const uint64_t w = c->waiting_since.load();
      if (w == 0 || (since != 0 && w >= since)) continue;
      // Under the mutex the session has not left the set: either alive, or its destructor waits here
      // (lock() then answers null).
      if (auto held = c->weak_from_this().lock()) {
        oldest = std::move(held);
        since = w;
      }
    }
  }
  if (!oldest) return false;
  net::post(oldest->executor(), [oldest] { oldest->evict_if_waiting(); });
  return true;
}

HttpListener::HttpListener(std::string name, HttpLimits limits, size_t io_threads, size_t handler_threads)
    : impl_(std::make_unique<Impl>(std::move(name), limits, io_threads, handler_threads)) {}

HttpListener::~HttpListener() { stop(); }

void HttpListener::route(const std::string& method, const std::string& pattern, BlockingHandler handler) {
  impl_->routes.push_back({method, std::regex(pattern), std::move(handler), nullptr});
}
void HttpListener::route_async(const std::string& method, const std::string& pattern, AsyncHandler handler, StartOn start_on) {
  impl_->routes.push_back({method, std::regex(pattern), nullptr, std::move(handler), start_on});
}
void HttpListener::set_pre_routing(PreRouting fn) { impl_->pre_routing = std::move(fn); }
void HttpListener::set_request_ids(RequestIds fn) { impl_->request_ids = std::move(fn); }
void HttpListener::use_tls(std::shared_ptr<TlsContext> context) { impl_->tls = std::move(context); }
void HttpListener::set_logger(Logger fn) { impl_->logger = std::make_shared<const Logger>(std::move(fn)); }
size_t HttpListener::connections() const { return impl_->open.load(); }
size_t HttpListener::unanswered() const { return impl_->unanswered.load(); }

int HttpListener::bind(const std::string& host, int port) {
  beast::error_code ec;
  const auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  const std::string where = host + ":" + std::to_string(port);
  if (ec) throw std::runtime_error("cannot listen on " + where + ": '" + host + "' is not a numeric address");
  const tcp::endpoint endpoint(address, uint16_t(port));
  auto& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen on " + where + " (in use, or not an address of this machine): " + ec.message());
  return a.local_endpoint().port();
}

void HttpListener::start() {
  Impl& l = *impl_;
  if (l.started) return;
  l.started = true;
  l.accept();
  for (size_t i = 0; i < l.io_threads; ++i)
    l.threads.emplace_back([&l] {
      // An exception out of a handler (Beast's parser throws on some inputs, an allocation may fail)
      // unwinds the operation that ran it: the connection it served loses its last pending operation
      // and closes. The thread logs it and serves on; nothing else is lost.
      for (;;) {
        try {
          l.io.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("{}: an I/O handler threw ({}); its connection is closed, the listener serves on", l.name, e.what());
        } catch (...) {
          spdlog::error("{}: an I/O handler threw a non-standard exception; its connection is closed, the listener serves on", l.name);
        }
      }
    });
}

size_t HttpListener::drain(std::chrono::milliseconds timeout) {
  Impl& l = *impl_;
  if (!l.started || l.stopped) return 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // The acceptor belongs to the I/O threads: closed there, and closed before drain returns.
  auto closed = std::make_shared<std::promise<void>>();
  auto acceptor_closed = closed->get_future();
  net::post(l.io, [&l, closed] {
    beast::error_code ec;
    l.acceptor.close(ec);
    closed->set_value();
  });
  acceptor_closed.wait_until(deadline);
  while (l.unanswered.load() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  return l.unanswered.load();
}

void HttpListener::stop() {
  Impl& l = *impl_;
  if (l.stopped) return;
  l.stopped = true;
  {
    std::lock_guard lock(l.liveness->mutex);
    l.liveness->alive = false;  // exchanges held elsewhere touch no connection from now on
  }
  if (l.started) {
    net::post(l.io, [&l] {
      beast::error_code ec;
      l.acceptor.close(ec);
    });
    std::vector<std::shared_ptr<Connection>> open_sessions;  // released outside the lock: ~Session takes it
    {
      std::lock_guard lock(l.sessions_mutex);
      for (Connection* s : l.sessions)
        if (auto keep = s->weak_from_this().lock()) open_sessions.push_back(std::move(keep));
    }
    for (auto& s : open_sessions) net::post(s->executor(), [s] { s->close(); });
    open_sessions.clear();
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (l.open.load() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  }
  l.io.stop();
  for (auto& t : l.threads) t.join();
  l.threads.clear();
  l.handlers.join();
}

}  // namespace tokenhost
