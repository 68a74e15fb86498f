// JSON replies of the admin API, shared by its route files: errors as {"error": {"message", "type"}}
// with a 4xx status, answers pretty-printed, request bodies that must be JSON objects.
#pragma once

#include <optional>
#include <string>

#include "api/client_json.hpp"
#include "api/api_error.hpp"
#include "http/http_message.hpp"
#include <nlohmann/json.hpp>

namespace tokenhost {

inline void reply_error(HttpResponse& res, int status, const std::string& message, const std::string& type) {
  res.status = status;
  // The message may quote the client's bytes (a JSON error's "last read"): invalid UTF-8 is replaced.
  res.set_content(api::dump_json(nlohmann::json{{"error", {{"message", message}, {"type", type}}}}), "application/json");
}

inline void reply_json(HttpResponse& res, const nlohmann::json& body) {
  res.set_content(body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

// The body as a JSON object (its depth bounded: api/client_json.hpp), or nullopt after replying 400.
inline std::optional<nlohmann::json> parse_body(const HttpRequest& req, HttpResponse& res) {
  auto body = api::parse_client_json(req.body);
  if (!body) {
    reply_error(res, 400, "malformed JSON: " + body.error().message, "invalid_request_error");
    return std::nullopt;
  }
  if (!body->is_object()) {
    reply_error(res, 400, "the request body must be a JSON object", "invalid_request_error");
    return std::nullopt;
  }
  return std::move(body.value());
}

}  // namespace tokenhost
