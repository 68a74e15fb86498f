// A client of a running server's admin API (what `tokenhost admin` speaks): JSON over HTTP with the
// admin bearer token. Every call returns the parsed JSON answer or throws AdminCallError with the
// server's own message, so callers print one line that says what went wrong.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace tokenhost {

class HttpClient;

struct AdminCallError : std::runtime_error {
  AdminCallError(int status, const std::string& message) : std::runtime_error(message), http_status(status) {}
  int http_status;  // 0: no answer came (the server was not reached, or it did not answer in time)
};

// Where the token comes from, first found: `explicit_token`, $TOKENHOST_ADMIN_TOKEN, the file the
// server at `url` writes when it generates one (admin_token_path of its port). "" when none.
std::string find_admin_token(const std::string& explicit_token, const std::string& url);

class AdminClient {
 public:
  // url: "http[s]://HOST:PORT" of the admin API. With https, the server's certificate must chain to
  // ca_file's certificates ("": the system's), unless insecure. Throws std::invalid_argument for a URL
  // it cannot use.
  AdminClient(const std::string& url, std::string token, const std::string& ca_file = "", bool insecure = false);
  ~AdminClient();

  nlohmann::json get(const std::string& path);
  nlohmann::json post(const std::string& path, const nlohmann::json& body);
  nlohmann::json patch(const std::string& path, const nlohmann::json& body);
  nlohmann::json del(const std::string& path);
  const std::string& url() const { return url_; }

 private:
  nlohmann::json call(const std::string& method, const std::string& path, const nlohmann::json* body);
  std::string url_;
  std::string token_;
  std::unique_ptr<HttpClient> http_;
};

}  // namespace tokenhost
