// Plain TCP for the hostile-client suite: it must send what a well-behaved HTTP client never would
// (headers a byte a second, bodies without end, framing that contradicts itself), so it speaks HTTP/1.1
// by hand over blocking sockets.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tokenhost::hostile {

// One client connection; closed on destruction.
class Conn {
 public:
  Conn() = default;
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      const int e = errno;
      ::close(fd_);
      fd_ = -1;
      throw std::runtime_error("connect to port " + std::to_string(port) + ": " + std::strerror(e));
    }
  }
  Conn(Conn&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Conn& operator=(Conn&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  // Sends all of data; false when the peer has closed or reset the connection.
  bool send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Waits up to timeout for bytes; returns what came ("" at end of stream or timeout). *closed is set
  // when the peer closed the connection.
  std::string receive(std::chrono::milliseconds timeout, bool* closed = nullptr) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(timeout.count())) <= 0) return {};
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return {};
    }
    return std::string(buf, size_t(n));
  }
  // Reads until the whole answer (headers and a Content-Length body) or the timeout; "" when none.
  std::string read_answer(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    std::string got;
    bool closed = false;
    while (!closed && std::chrono::steady_clock::now() < end) {
      got += receive(std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()), &closed);
      const size_t head = got.find("\r\n\r\n");
      if (head == std::string::npos) continue;
      const size_t cl = got.find("Content-Length: ");
      if (cl == std::string::npos || cl > head) return got;
      if (got.size() >= head + 4 + std::stoul(got.substr(cl + 16))) return got;
    }
    return got;
  }
  // Whether the peer has closed the connection (waits up to timeout for its FIN).
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    do {
      bool closed = false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      receive(std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(50)), &closed);
      if (closed) return true;
    } while (std::chrono::steady_clock::now() < end);
    return false;
  }

 private:
  int fd_ = -1;
};

inline int status_of(const std::string& answer) {
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || answer.size() < 12) return 0;
  return std::stoi(answer.substr(9, 3));
}

inline std::string body_of(const std::string& answer) {
  const size_t head = answer.find("\r\n\r\n");
  return head == std::string::npos ? std::string() : answer.substr(head + 4);
}

inline std::string post_request(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// One request on a fresh connection: the answer ("" when none came in time).
inline std::string round_trip(int port, const std::string& request, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  Conn c(port);
  if (!c.send(request)) return {};
  return c.read_answer(timeout);
}

}  // namespace tokenhost::hostile
