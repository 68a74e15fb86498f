#include "http/http_servers.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cerrno>
#include <filesystem>
#include <random>
#include <cstring>

#include <spdlog/spdlog.h>

#include "http/admin_experiment_routes.hpp"
#include "http/admin_json.hpp"
#include "http/dashboard_route.hpp"
#include "http/http_tls.hpp"
#include "util/json_to_toml.hpp"
#include "http/gateway_routes.hpp"
#include "http/tokenize_routes.hpp"
#include "plugin/kind.hpp"
#include "request/request_id.hpp"
#include "server/gateway.hpp"

namespace tokenhost {
namespace {

using nlohmann::json;

constexpr size_t kGatewayMaxBody = 8 << 20, kAdminMaxBody = 1 << 20;
// The largest /tokenize answer, in gateway bodies (32 MiB): with pieces an answer is ~15x its text.
constexpr size_t kTokenizeAnswerBodies = 4;
// The gateway's I/O threads are http_threads, up to this many (a manifest written for one thread per
// connection may ask for a thousand); the admin API's are fixed: it serves operators, not traffic.
constexpr int kMaxIoThreads = 64;
// The gateway's handler threads parse, admit and tokenize requests (and answer /tokenize, /v1/models):
// more than two, so that two large bodies leave a thread for the small ones.
constexpr size_t kAdminIoThreads = 1, kAdminHandlerThreads = 4, kGatewayHandlerThreads = 4;

// Equal strings, in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string make_admin_token() {
  std::random_device rd;
  static const char hex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  return token;
}

// Writes a generated token for `tokenhost admin` (mode 0600, by rename: never half-written).
void write_admin_token(const std::string& token, int admin_port) {
  std::error_code ec;
  std::filesystem::create_directories(cache_dir(), ec);
  const std::string path = admin_token_path(admin_port);
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0 && ::write(fd, token.data(), token.size()) == ssize_t(token.size()) && ::close(fd) == 0 &&
      std::rename(tmp.c_str(), path.c_str()) == 0) {
    spdlog::info("admin API token generated and written to {} (set TOKENHOST_ADMIN_TOKEN or [server] admin_token to choose one)", path);
  } else {
    spdlog::warn("admin API token generated but not written to {}: {}; set TOKENHOST_ADMIN_TOKEN to choose one", path, std::strerror(errno));
  }
}

// Each open connection is a descriptor: raise the soft limit on open files to the hard limit so that
// the connection cap fits beside the model files and plugins, and say so when it cannot.
void raise_open_file_limit(size_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted + 256) return;
  rlim_t before = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) == 0) spdlog::info("open file limit raised from {} to {}", before, lim.rlim_cur);
  if (lim.rlim_cur < wanted + 256)
    spdlog::warn("open file limit {} is below the {} connections the gateway accepts; raise it (ulimit -n) to serve that many",
                 lim.rlim_cur, wanted);
}

// Health probes, on both ports and without credentials (load balancers and orchestrators send none),
// still answered past the connection cap (HttpLimits::reserved_paths). /health: ok, degraded or
// failing (Gateway::Health); /ready: it takes traffic (not failing).
const std::vector<std::string> kHealthPaths = {"/health", "/ready"};

bool is_health_path(const HttpRequest& req) {
  return req.method == "GET" && std::find(kHealthPaths.begin(), kHealthPaths.end(), req.path) != kHealthPaths.end();
}

nlohmann::json health_json(const Gateway::Health& h, bool accepting) {
  nlohmann::json down = nlohmann::json::array();
  for (const auto& d : h.down_engines) down.push_back({{"engine", d.engine}, {"reason", d.reason}, {"state", d.state}});
  nlohmann::json j = {{"status", h.name()}, {"engines_down", down}, {"models_without_engine", h.models_without_engine}};
  if (!accepting) j["reason"] = "shutting down";
  return j;
}

void add_health_routes(HttpListener& listener, const Gateway& gateway) {
  // Liveness with what is wrong: 200 ok or degraded (some engines down, every model served), 503
  // failing (a model without an engine, or shutting down).
  listener.route("GET", "/health", [&gateway](const HttpRequest&, HttpResponse& res) {
    const Gateway::Health h = gateway.health();
    if (h.state == Gateway::Health::State::failing) res.status = 503;
    reply_json(res, health_json(h, gateway.accepting()));
  });
  // Readiness: whether to send traffic (every served model has an engine taking requests).
  listener.route("GET", "/ready", [&gateway](const HttpRequest&, HttpResponse& res) {
    const Gateway::Health h = gateway.health();
    if (h.state != Gateway::Health::State::failing) return reply_json(res, {{"status", "ready"}});
    res.status = 503;
    nlohmann::json j = health_json(h, gateway.accepting());
    j["status"] = "not_ready";
    reply_json(res, j);
  });
}

}  // namespace

HttpServers::HttpServers(Server& server) : server_(server) {
  const int asked = server_.deployment().server.http_threads;
  const int io_threads = std::min(asked, kMaxIoThreads);
  if (asked > kMaxIoThreads)
    spdlog::info("http_threads = {}: the gateway runs {} I/O threads, the most it uses (connections do not need a thread each)",
                 asked, kMaxIoThreads);
  HttpLimits gateway_limits;
  gateway_limits.max_body_bytes = kGatewayMaxBody;
  HttpLimits admin_limits;
  admin_limits.max_body_bytes = kAdminMaxBody;
  admin_limits.max_connections = 256;
  gateway_limits.reserved_paths = admin_limits.reserved_paths = kHealthPaths;
  raise_open_file_limit(gateway_limits.max_connections + admin_limits.max_connections);
  gateway_ = std::make_unique<HttpListener>("gateway", gateway_limits, size_t(io_threads), kGatewayHandlerThreads);
  admin_ = std::make_unique<HttpListener>("admin API", admin_limits, kAdminIoThreads, kAdminHandlerThreads);
  const ServerDecl& decl = server_.deployment().server;
  if (decl.tls.enabled()) gateway_->use_tls(load_server_tls(decl.tls.certificate, decl.tls.private_key));
  if (decl.admin_tls.enabled()) admin_->use_tls(load_server_tls(decl.admin_tls.certificate, decl.admin_tls.private_key));
  // Every gateway request has an id: the client's X-Request-Id when usable, else a new one.
  gateway_->set_request_ids([](const HttpRequest& req) { return request::request_id_from(req.header("X-Request-Id")); });
  add_gateway_routes(*gateway_, server_.gateway(), server_.deployment().server);
  add_tokenize_routes(*gateway_, server_.gateway(), kTokenizeAnswerBodies * kGatewayMaxBody);
  add_health_routes(*gateway_, server_.gateway());
  // With API keys, every gateway request carries one (as vLLM's --api-key); without, the gateway is open.
  if (!server_.deployment().server.api_keys.empty()) {
    gateway_->set_pre_routing([this](const HttpRequest& req, HttpResponse& res) {
      if (is_health_path(req)) return false;
      const std::string token = bearer_token(req);
      bool known = false;
      for (const auto& key : server_.deployment().server.api_keys) known |= same_secret(token, key);
      if (known) return false;
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content(json{{"error", {{"message", token.empty() ? "this server needs an API key: 'Authorization: Bearer <key>'"
                                                                 : "unknown API key"},
                                      {"type", "authentication_error"},
                                      {"param", nullptr},
                                      {"code", "invalid_api_key"}}}}.dump(),
                      "application/json");
      server_.gateway().count_refusal("api_key");
      spdlog::info("request {}: gateway refused {} {} from {} ({})", req.id, req.method, req.path, req.remote_addr,
                   token.empty() ? "no API key" : "unknown API key");
      return true;
    });
  }

  // Every /admin/ route needs the admin token; /health and /metrics stay open for probes and scrapers.
  admin_token_ = server_.deployment().server.admin_token.empty() ? make_admin_token() : server_.deployment().server.admin_token;
  admin_->set_pre_routing([this](const HttpRequest& req, HttpResponse& res) {
    if (req.path.rfind("/admin/", 0) != 0) return false;
    const std::string token = bearer_token(req);
    if (!token.empty() && same_secret(token, admin_token_)) return false;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(json{{"error", {{"message", token.empty() ? "the admin API needs 'Authorization: Bearer <admin token>'"
                                                               : "wrong admin token"},
                                    {"type", "authentication_error"}}}}.dump(),
                    "application/json");
    spdlog::warn("admin API: refused {} {} from {} ({})", req.method, req.path, req.remote_addr, token.empty() ? "no token" : "wrong token");
    return true;
  });

  add_health_routes(*admin_, server_.gateway());
  admin_->route("GET", "/metrics", [this](const HttpRequest&, HttpResponse& res) {
    res.set_content(server_.prometheus_text(), "text/plain; version=0.0.4");
  });
  add_dashboard_route(*admin_);
  admin_->route("GET", "/admin/engines", [this](const HttpRequest&, HttpResponse& res) { reply_json(res, server_.status()); });
  admin_->route("GET", "/admin/guards", [this](const HttpRequest&, HttpResponse& res) { reply_json(res, server_.guards()); });
  admin_->route("PATCH", "/admin/guards", [this](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    try {
      reply_json(res, nlohmann::json{{"ok", true}, {"guards", server_.change_guards(*body)}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "invalid_request_error");
    }
  });
  admin_->route("GET", "/admin/plugins", [this](const HttpRequest&, HttpResponse& res) { reply_json(res, server_.plugins()); });
  admin_->route("GET", "/admin/export", [this](const HttpRequest&, HttpResponse& res) {
    reply_json(res, {{"manifest", server_.export_manifest()}});
  });
  admin_->route("POST", "/admin/plugins", [this](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    auto manifest = body->find("manifest");
    if (manifest == body->end() || !manifest->is_string() || body->size() != 1)
      return reply_error(res, 400, "the body must be {\"manifest\": \"/path/to/plugin.toml\"}", "invalid_request_error");
    try {
      reply_json(res, {{"ok", true}, {"id", server_.register_plugin(manifest->get<std::string>())}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    }
  });

  auto set_slot = [this](const std::string& engine, const std::string& slot, const HttpRequest& req, HttpResponse& res) {
    const auto choice = parse_plugin_choice(req, res);
    if (!choice) return;
    try {
      std::string change = server_.set_slot(engine, slot, choice->plugin, json_to_toml(choice->config));
      reply_json(res, {{"ok", true}, {"change", change}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    } catch (const std::invalid_argument& e) {
      reply_error(res, 400, e.what(), "invalid_request_error");
    }
  };
  admin_->route("POST", R"(/admin/engines/([^/]+)/slots/([^/]+))", [set_slot](const HttpRequest& req, HttpResponse& res) {
    set_slot(req.matches[1], req.matches[2], req, res);
  });
  // The router's slot, served at /admin/router.
  admin_->route("POST", std::string("/admin/") + slot_of(TH_KIND_ROUTER).name(), [set_slot](const HttpRequest& req, HttpResponse& res) {
    set_slot("", slot_of(TH_KIND_ROUTER).name(), req, res);
  });
  // A stacking slot's layers (kv_connector): POST .../layers appends, POST .../layers/N replaces layer N,
  // POST .../layers/N?insert=1 inserts before it, DELETE .../layers/N removes it.
  auto change_layer = [this](const HttpRequest& req, HttpResponse& res, SlotSwap::LayerOp op, std::optional<uint32_t> position) {
    PluginChoice choice{"", json::object()};  // a removal names no plugin
    if (op != SlotSwap::LayerOp::remove) {
      auto parsed = parse_plugin_choice(req, res);
      if (!parsed) return;
      choice = std::move(*parsed);
    }
    try {
      const uint32_t at = position.value_or(Server::kAppendLayer);
      reply_json(res, {{"ok", true},
                       {"change", server_.change_layer(req.matches[1], req.matches[2], op, at, choice.plugin, json_to_toml(choice.config))}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    } catch (const std::invalid_argument& e) {
      reply_error(res, 400, e.what(), "invalid_request_error");
    }
  };
  auto layer_index = [](const std::string& text) -> std::optional<uint32_t> {
    if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return uint32_t(std::stoul(text));
  };
  admin_->route("POST", R"(/admin/engines/([^/]+)/slots/([^/]+)/layers)", [change_layer](const HttpRequest& req, HttpResponse& res) {
    change_layer(req, res, SlotSwap::LayerOp::insert, std::nullopt);
  });
  admin_->route("POST", R"(/admin/engines/([^/]+)/slots/([^/]+)/layers/([^/]+))", [change_layer, layer_index](const HttpRequest& req, HttpResponse& res) {
    const auto at = layer_index(req.matches[3]);
    if (!at) return reply_error(res, 400, "layer '" + std::string(req.matches[3]) + "' is not a position (0, 1, ...)", "invalid_request_error");
    change_layer(req, res, req.param("insert") == "1" ? SlotSwap::LayerOp::insert : SlotSwap::LayerOp::replace, at);
  });
  admin_->route("DELETE", R"(/admin/engines/([^/]+)/slots/([^/]+)/layers/([^/]+))", [change_layer, layer_index](const HttpRequest& req, HttpResponse& res) {
    const auto at = layer_index(req.matches[3]);
    if (!at) return reply_error(res, 400, "layer '" + std::string(req.matches[3]) + "' is not a position (0, 1, ...)", "invalid_request_error");
    change_layer(req, res, SlotSwap::LayerOp::remove, at);
  });
  admin_->route("DELETE", R"(/admin/engines/([^/]+)/slots/([^/]+))", [this](const HttpRequest& req, HttpResponse& res) {
    try {
      reply_json(res, {{"ok", true}, {"change", server_.unload_slot(req.matches[1], req.matches[2])}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    }
  });
  admin_->route("POST", R"(/admin/engines/([^/]+)/prefix_cache/flush)", [this](const HttpRequest& req, HttpResponse& res) {
    try {
      reply_json(res, {{"ok", true}, {"change", server_.flush_prefix_cache(req.matches[1])}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    }
  });
  admin_->route("POST", "/admin/engines", [this](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    auto text = body->find("toml");
    if (text == body->end() || !text->is_string())
      return reply_error(res, 400, "the body must be {\"toml\": \"[engines.NAME] ...\"} (and optionally \"file\": a name for errors)",
                         "invalid_request_error");
    for (const auto& [k, v] : body->items())
      if (k != "toml" && !(k == "file" && v.is_string()))
        return reply_error(res, 400, "unknown or mistyped field '" + k + "' (expected 'toml' and 'file')", "invalid_request_error");
    try {
      reply_json(res, {{"ok", true}, {"change", server_.add_engines(text->get<std::string>(), body->value("file", "admin request"))}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    }
  });
  admin_->route("DELETE", R"(/admin/engines/([^/]+))", [this](const HttpRequest& req, HttpResponse& res) {
    double grace_s = 30;
    if (req.has_param("grace_s")) {
      const std::string v = req.param("grace_s");
      char* end = nullptr;
      grace_s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(grace_s >= 0 && grace_s <= 3600))
        return reply_error(res, 400, "grace_s must be a number of seconds from 0 to 3600, not '" + v + "'", "invalid_request_error");
    }
    try {
      reply_json(res, {{"ok", true}, {"change", server_.remove_engine(req.matches[1], std::chrono::milliseconds(int64_t(grace_s * 1000)))}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    }
  });
  add_experiment_routes(*admin_, server_);
  // Every refused admin change leaves a log line (the answer alone reaches only the caller).
  admin_->set_logger([](const HttpRequest& req, const HttpResponse& res) {
    if (req.method == "GET" || req.method == "HEAD" || res.status < 400 || req.path.rfind("/admin/", 0) != 0) return;
    std::string why = res.body;
    if (auto body = json::parse(res.body, nullptr, false); body.is_object() && body.contains("error") &&
                                                           body["error"].is_object() && body["error"].contains("message"))
      why = body["error"]["message"].is_string() ? body["error"]["message"].get<std::string>() : body["error"]["message"].dump();
    spdlog::warn("admin {} {} refused ({}): {}", req.method, req.path, res.status, why);
  });
}

HttpServers::~HttpServers() { stop(); }

void HttpServers::start() {
  const auto& cfg = server_.deployment().server;
  gateway_port_ = gateway_->bind(cfg.listen.host, cfg.listen.port);
  admin_port_ = admin_->bind(cfg.admin_listen.host, cfg.admin_listen.port);
  if (cfg.admin_token.empty()) write_admin_token(admin_token_, admin_port_);
  gateway_->start();
  admin_->start();
  if (!is_loopback(cfg.admin_listen.host))
    spdlog::warn("THE ADMIN API LISTENS ON {}:{}, NOT ON LOOPBACK: whoever reaches it with the admin token can load a "
                 "library into this server and run code as its user (README: Security model). Keep the token "
                 "secret and the port firewalled, or bind admin_listen to 127.0.0.1.{}",
                 cfg.admin_listen.host, admin_port_,
                 cfg.admin_tls.enabled() ? "" : " Without admin_tls_certificate the token crosses the network in clear text.");
  // Scripts read this line's addresses: TLS is said after them.
  const char* tls = cfg.tls.enabled() ? (cfg.admin_tls.enabled() ? "; both speak HTTPS" : "; the gateway speaks HTTPS")
                                      : (cfg.admin_tls.enabled() ? "; the admin API speaks HTTPS" : "");
  spdlog::info("gateway listening on {}:{}, admin API on {}:{}{}", cfg.listen.host, gateway_port_, cfg.admin_listen.host,
               admin_port_, tls);
}

void HttpServers::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto* l : {gateway_.get(), admin_.get()}) {
    if (l == nullptr) continue;
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    if (const size_t n = l->drain(left); n > 0)
      spdlog::warn("{} {} answer(s) still unwritten after {} ms: their connections are closed", n,
                   l == gateway_.get() ? "gateway" : "admin API", timeout.count());
  }
}

void HttpServers::stop() {
  if (gateway_) gateway_->stop();
  if (admin_) admin_->stop();
}

}  // namespace tokenhost
