#include "admin/admin_client.hpp"

#include <cstdlib>
#include <fstream>

#include "http/http_client.hpp"
#include "loadgen/client.hpp"
#include "manifest/deployment.hpp"

namespace tokenhost {

std::string find_admin_token(const std::string& explicit_token, const std::string& url) {
  if (!explicit_token.empty()) return explicit_token;
  if (const char* env = std::getenv("TOKENHOST_ADMIN_TOKEN"); env != nullptr && *env != '\0') return env;
  std::ifstream in(admin_token_path(loadgen::parse_url(url).port));
  std::string token;
  if (in) std::getline(in, token);
  return token;
}

AdminClient::AdminClient(const std::string& url, std::string token, const std::string& ca_file, bool insecure)
    : url_(url), token_(std::move(token)) {
  loadgen::Target t = loadgen::parse_url(url);
  HttpClientOptions options;
  options.connect_timeout = std::chrono::seconds(5);
  // A swap or an engine drain can take as long as the longest step; a new engine loads its plugins.
  options.read_timeout = std::chrono::seconds(180);
  if (!token_.empty()) options.headers.emplace_back("Authorization", "Bearer " + token_);
  options.tls.enabled = t.tls;
  options.tls.ca_file = ca_file;
  options.tls.verify = !insecure;
  http_ = std::make_unique<HttpClient>(t.host, t.port, std::move(options));
}

AdminClient::~AdminClient() = default;

nlohmann::json AdminClient::get(const std::string& path) { return call("GET", path, nullptr); }
nlohmann::json AdminClient::post(const std::string& path, const nlohmann::json& body) { return call("POST", path, &body); }
nlohmann::json AdminClient::patch(const std::string& path, const nlohmann::json& body) { return call("PATCH", path, &body); }
nlohmann::json AdminClient::del(const std::string& path) { return call("DELETE", path, nullptr); }

nlohmann::json AdminClient::call(const std::string& method, const std::string& path, const nlohmann::json* body) {
  HttpClientResult r = http_->request(method, path, body ? body->dump() : std::string(), body ? "application/json" : "");
  switch (r.error) {
    case HttpClientError::none:
      break;
    case HttpClientError::refused:
      throw AdminCallError(0, "cannot reach the admin API at " + url_ + " (connection refused); is `tokenhost serve` running there? (--url)");
    case HttpClientError::resolve:
    case HttpClientError::connect_timeout:
    case HttpClientError::connect:
      throw AdminCallError(0, "cannot reach the admin API at " + url_ + " (" + r.message + "); is `tokenhost serve` running there? (--url)");
    case HttpClientError::tls:
      throw AdminCallError(0, r.message + " (--cacert FILE trusts the server's certificate; --insecure skips the check)");
    default:  // reached, but no whole answer came
      throw AdminCallError(0, method + " " + path + ": " + r.message);
  }
  nlohmann::json answer = nlohmann::json::parse(r.body, nullptr, false);
  if (r.status >= 400) {
    std::string message = answer.is_object() && answer.contains("error") && answer["error"].is_object()
                              ? answer["error"].value("message", r.body)
                              : r.body;
    if (r.status == 401 && token_.empty())
      message += " (no token found: pass --token, set TOKENHOST_ADMIN_TOKEN, or run where the server wrote " +
                 admin_token_path(loadgen::parse_url(url_).port) + ")";
    throw AdminCallError(r.status, method + " " + path + ": " + message);
  }
  if (answer.is_discarded()) throw AdminCallError(r.status, method + " " + path + " answered something that is not JSON");
  return answer;
}

}  // namespace tokenhost
