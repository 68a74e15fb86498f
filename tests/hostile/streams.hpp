// Many server-sent-event streams at once on one thread (Asio): each connects, posts its request and
// reads until `data: [DONE]`, noting when its first token and its end came.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "raw_http.hpp"

namespace tokenhost::hostile {

struct StreamOutcome {
  int status = 0;
  bool done = false;            // saw data: [DONE]
  double first_event_s = -1;    // from sending to the first data event
  double end_s = -1;
  std::string error;
};

// Runs every request (a whole HTTP request text each) to its end, at most `timeout` in all.
inline std::vector<StreamOutcome> run_streams(int port, const std::vector<std::string>& requests,
                                              std::chrono::seconds timeout) {
  namespace net = boost::asio;
  using tcp = net::ip::tcp;
  net::io_context io;
  std::vector<StreamOutcome> out(requests.size());
  struct One : std::enable_shared_from_this<One> {
    One(net::io_context& io, StreamOutcome& o, const std::string& r) : socket(io), outcome(o), request(r) {}
    tcp::socket socket;
    StreamOutcome& outcome;
    const std::string& request;
    std::string got;
    char buf[16384];
    std::chrono::steady_clock::time_point sent;
    void start(const tcp::endpoint& at) {
      socket.async_connect(at, [self = shared_from_this()](boost::system::error_code ec) {
        if (ec) return self->fail("connect: " + ec.message());
        self->sent = std::chrono::steady_clock::now();
        net::async_write(self->socket, net::buffer(self->request), [self](boost::system::error_code ec, size_t) {
          if (ec) return self->fail("write: " + ec.message());
          self->read();
        });
      });
    }
    void read() {
      socket.async_read_some(net::buffer(buf), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
        if (ec) return self->fail(self->outcome.done ? "" : "read: " + ec.message());
        self->got.append(self->buf, n);
        const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - self->sent).count();
        if (self->outcome.status == 0) self->outcome.status = status_of(self->got);
        if (self->outcome.first_event_s < 0 && self->got.find("data: {") != std::string::npos) self->outcome.first_event_s = now;
        if (self->got.find("data: [DONE]") != std::string::npos) {
          self->outcome.done = true;
          self->outcome.end_s = now;
          boost::system::error_code ignored;
          self->socket.close(ignored);
          return;
        }
        if (self->outcome.status != 0 && self->outcome.status != 200 && self->got.find("\r\n\r\n") != std::string::npos) {
          self->outcome.error = body_of(self->got);
          boost::system::error_code ignored;
          self->socket.close(ignored);
          return;
        }
        // Keep only the tail that may hold a split marker.
        if (self->got.size() > 65536) self->got.erase(0, self->got.size() - 64);
        self->read();
      });
    }
    void fail(const std::string& why) {
      if (!why.empty() && outcome.error.empty()) outcome.error = why;
    }
  };
  const tcp::endpoint at(net::ip::address_v4::loopback(), uint16_t(port));
  for (size_t i = 0; i < requests.size(); ++i) std::make_shared<One>(io, out[i], requests[i])->start(at);
  io.run_for(timeout);
  for (auto& o : out)
    if (!o.done && o.error.empty()) o.error = "not finished within " + std::to_string(timeout.count()) + " s";
  return out;
}

}  // namespace tokenhost::hostile
