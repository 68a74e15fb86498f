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

// A plugin for a slot or a stack's layer: {"plugin": ID, "config": {...}} (config optional), or nullopt
// after replying 400 naming what was wrong.
struct PluginChoice {
  std::string plugin;
  nlohmann::json config;
};
inline std::optional<PluginChoice> parse_plugin_choice(const HttpRequest& req, HttpResponse& res) {
  auto body = parse_body(req, res);
  if (!body) return std::nullopt;
  auto plugin = body->find("plugin");
  if (plugin == body->end() || !plugin->is_string()) {
    reply_error(res, 400, "field 'plugin' (a plugin id string) is required", "invalid_request_error");
    return std::nullopt;
  }
  for (const auto& [k, v] : body->items())
    if (k != "plugin" && k != "config") {
      reply_error(res, 400, "unknown field '" + k + "' (expected 'plugin' and 'config')", "invalid_request_error");
      return std::nullopt;
    }
  PluginChoice choice{plugin->get<std::string>(), body->value("config", nlohmann::json::object())};
  if (!choice.config.is_object()) {
    reply_error(res, 400, "'config' must be an object", "invalid_request_error");
    return std::nullopt;
  }
  return choice;
}

}  // namespace tokenhost
