#include "admin/admin_client.hpp"

#include <cstdlib>
#include <fstream>

#include <httplib.h>

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

AdminClient::AdminClient(const std::string& url, std::string token) : url_(url), token_(std::move(token)) {
  loadgen::Target t = loadgen::parse_url(url);
  http_ = std::make_unique<httplib::Client>(t.host, t.port);
  http_->set_connection_timeout(5);
  // A swap or an engine drain can take as long as the longest step; a new engine loads its plugins.
  http_->set_read_timeout(180);
}

AdminClient::~AdminClient() = default;

nlohmann::json AdminClient::get(const std::string& path) { return call("GET", path, nullptr); }
nlohmann::json AdminClient::post(const std::string& path, const nlohmann::json& body) { return call("POST", path, &body); }
nlohmann::json AdminClient::patch(const std::string& path, const nlohmann::json& body) { return call("PATCH", path, &body); }
nlohmann::json AdminClient::del(const std::string& path) { return call("DELETE", path, nullptr); }

nlohmann::json AdminClient::call(const std::string& method, const std::string& path, const nlohmann::json* body) {
  httplib::Headers headers;
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  std::string text = body ? body->dump() : std::string();
  httplib::Result r = method == "GET"     ? http_->Get(path, headers)
                      : method == "POST"  ? http_->Post(path, headers, text, "application/json")
                      : method == "PATCH" ? http_->Patch(path, headers, text, "application/json")
                                          : http_->Delete(path, headers);
  if (!r)
    throw AdminCallError(0, "cannot reach the admin API at " + url_ + " (" + httplib::to_string(r.error()) +
                                "); is `tokenhost serve` running there? (--url)");
  nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status >= 400) {
    std::string message = answer.is_object() && answer.contains("error") && answer["error"].is_object()
                              ? answer["error"].value("message", r->body)
                              : r->body;
    if (r->status == 401 && token_.empty())
      message += " (no token found: pass --token, set TOKENHOST_ADMIN_TOKEN, or run where the server wrote " +
                 admin_token_path(loadgen::parse_url(url_).port) + ")";
    throw AdminCallError(r->status, method + " " + path + ": " + message);
  }
  if (answer.is_discarded()) throw AdminCallError(r->status, method + " " + path + " answered something that is not JSON");
  return answer;
}

}  // namespace tokenhost
