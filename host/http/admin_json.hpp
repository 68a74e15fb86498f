// JSON replies of the admin API, shared by its route files: errors as {"error": {"message", "type"}}
// with a 4xx status, answers pretty-printed, request bodies that must be JSON objects.
#pragma once

#include <optional>
#include <string>

#include "http/http_message.hpp"
#include <nlohmann/json.hpp>

namespace tokenhost {

inline void reply_error(HttpResponse& res, int status, const std::string& message, const std::string& type) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", {{"message", message}, {"type", type}}}}.dump(), "application/json");
}

inline void reply_json(HttpResponse& res, const nlohmann::json& body) {
  res.set_content(body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

// The body as a JSON object, or nullopt after replying 400.
inline std::optional<nlohmann::json> parse_body(const HttpRequest& req, HttpResponse& res) {
  try {
    nlohmann::json body = nlohmann::json::parse(req.body);
    if (!body.is_object()) {
      reply_error(res, 400, "the request body must be a JSON object", "invalid_request_error");
      return std::nullopt;
    }
    return body;
  } catch (const nlohmann::json::parse_error& e) {
    reply_error(res, 400, std::string("malformed JSON: ") + e.what(), "invalid_request_error");
    return std::nullopt;
  }
}

}  // namespace tokenhost
