// The two HTTP front doors of a Server: the gateway (inference requests) and the admin API (status,
// plugins, slot changes, health, metrics). Each is its own HttpListener with its own I/O threads, so
// the admin port answers whatever the gateway carries.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "server/server.hpp"

#include "http/http_listener.hpp"

namespace tokenhost {

class HttpServers {
 public:
  explicit HttpServers(Server& server);
  ~HttpServers();  // stops both
  // Binds both listeners (port 0 picks a free port) and serves in background threads. Throws
  // std::runtime_error naming the address that could not be bound.
  void start();
  // Stops taking connections and lets the answers already given reach their clients (a request the
  // server ended while draining is answered asynchronously, up to a pump tick later), for up to
  // timeout. Call between Server::drain() and stop().
  void drain(std::chrono::milliseconds timeout = std::chrono::seconds(2));
  void stop();
  int gateway_port() const { return gateway_port_; }
  // What the admin API's Authorization header must carry after "Bearer ".
  const std::string& admin_token() const { return admin_token_; }
  int admin_port() const { return admin_port_; }

 private:
  Server& server_;
  std::unique_ptr<HttpListener> gateway_, admin_;
  int gateway_port_ = 0, admin_port_ = 0;
  std::string admin_token_;
};

}  // namespace tokenhost
