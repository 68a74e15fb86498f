#include "http/admin_experiment_routes.hpp"

#include "http/admin_json.hpp"
#include "server/server.hpp"

namespace tokenhost {

void add_experiment_routes(HttpListener& admin, Server& server) {
  // Runs an operation that may be refused: its AdminError becomes the 4xx answer.
  auto guarded = [](HttpResponse& res, auto&& operation) {
    try {
      reply_json(res, operation());
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), e.http_status == 404 ? "not_found_error" : e.http_status == 409 ? "conflict_error" : "invalid_request_error");
    }
  };
  admin.route("GET", "/admin/experiments", [&server](const HttpRequest&, HttpResponse& res) { reply_json(res, server.experiments()); });
  admin.route("POST", "/admin/experiments", [&server, guarded](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    guarded(res, [&] { return nlohmann::json{{"ok", true}, {"experiment", server.start_experiment(*body)}}; });
  });
  admin.route("PATCH", R"(/admin/experiments/([^/]+))", [&server, guarded](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    guarded(res, [&] { return nlohmann::json{{"ok", true}, {"change", server.change_experiment(req.matches[1], *body)}}; });
  });
  admin.route("DELETE", R"(/admin/experiments/([^/]+))", [&server, guarded](const HttpRequest& req, HttpResponse& res) {
    guarded(res, [&] { return nlohmann::json{{"ok", true}, {"change", server.stop_experiment(req.matches[1])}}; });
  });
  admin.route("GET", R"(/admin/experiments/([^/]+)/report)", [&server, guarded](const HttpRequest& req, HttpResponse& res) {
    guarded(res, [&] { return server.experiment_report(req.matches[1]); });
  });
}

}  // namespace tokenhost
