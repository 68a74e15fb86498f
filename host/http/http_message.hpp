// An HTTP request and response as the route handlers see them: plain values, no network library. The
// listener (http_listener.hpp) reads the one and writes the other.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenhost {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target up to '?', percent-decoded
  std::map<std::string, std::string> query;  // decoded; a repeated key keeps its last value
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_addr;  // numeric, as the socket reports it
  int remote_port = 0;
  std::vector<std::string> matches;  // the route pattern's whole match, then its groups (decoded)
  // The request's id on a listener that gives ids (HttpListener::set_request_ids): its answer carries
  // it as X-Request-Id. "" otherwise.
  std::string id;

  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
  bool has_param(const std::string& key) const { return query.count(key) > 0; }
  std::string param(const std::string& key) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type and Content-Length
  std::string content_type;
  std::string body;

  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
};

// "%41b+c" -> "Ab c" (plus as space when form is true, as in a query string); an invalid escape is kept
// as written.
std::string percent_decode(std::string_view text, bool form);
// The key=value pairs of a query string, decoded.
std::map<std::string, std::string> parse_query(std::string_view query);

}  // namespace tokenhost
