#include "http/admin_experiment_routes.hpp"

#include "http/admin_json.hpp"
#include "server/server.hpp"

namespace tokenhost {

void add_experiment_routes(httplib::Server& admin, Server& server) {
  // Runs an operation that may be refused: its AdminError becomes the 4xx answer.
  auto guarded = [](httplib::Response& res, auto&& operation) {
    try {
      reply_json(res, operation());
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), e.http_status == 404 ? "not_found_error" : e.http_status == 409 ? "conflict_error" : "invalid_request_error");
    }
  };
  admin.Get("/admin/experiments", [&server](const httplib::Request&, httplib::Response& res) { reply_json(res, server.experiments()); });
  admin.Post("/admin/experiments", [&server, guarded](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    guarded(res, [&] { return nlohmann::json{{"ok", true}, {"experiment", server.start_experiment(*body)}}; });
  });
  admin.Patch(R"(/admin/experiments/([^/]+))", [&server, guarded](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    guarded(res, [&] { return nlohmann::json{{"ok", true}, {"change", server.change_experiment(req.matches[1], *body)}}; });
  });
  admin.Delete(R"(/admin/experiments/([^/]+))", [&server, guarded](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { return nlohmann::json{{"ok", true}, {"change", server.stop_experiment(req.matches[1])}}; });
  });
  admin.Get(R"(/admin/experiments/([^/]+)/report)", [&server, guarded](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { return server.experiment_report(req.matches[1]); });
  });
}

}  // namespace tokenhost
