// A raw loopback TCP client for the HTTP layer's tests: bytes written and read as a careless or
// hostile client would, with no HTTP of its own.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace tokenhost::testing {

// A loopback TCP port free a moment ago (bound to port 0 and closed): for a listener that must be
// named before it starts (a peer's address in a manifest).
inline int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A loopback TCP connection read and written byte by byte, as a hostile client would.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return fd_ >= 0; }
  bool send(const std::string& data) { return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == ssize_t(data.size()); }
  // Reads until `until` appears in what was read, the peer closes, or timeout passes.
  std::string read(std::chrono::milliseconds timeout, const std::string& until = "") {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (!until.empty() && got_.find(until) != std::string::npos) break;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got_.append(buf, size_t(n));
    }
    return got_;
  }
  // Whether the server closed the connection within timeout (reading and dropping what it sent).
  bool closed_within(std::chrono::milliseconds timeout) {
    read(timeout);
    return closed_;
  }
  void close() {
    ::close(fd_);
    fd_ = -1;
  }
  // Ends what this side sends (the peer reads end of stream), keeping the connection open to read.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

 private:
  int fd_ = -1;
  std::string got_;
  bool closed_ = false;
};

}  // namespace tokenhost::testing
