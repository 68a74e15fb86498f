#include "http/http_servers.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cerrno>
#include <filesystem>
#include <random>
#include <cstring>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "http/admin_experiment_routes.hpp"
#include "http/admin_json.hpp"
#include "http/dashboard_route.hpp"
#include "http/openai_routes.hpp"

namespace tokenhost {
namespace {

using nlohmann::json;

constexpr size_t kGatewayMaxBody = 8 << 20, kAdminMaxBody = 1 << 20;

// Each streaming client holds a socket (and a pool thread) for as long as it reads: raise the soft
// limit on open files to the hard limit so a thousand of them fit beside the model files and plugins.
// Equal strings, in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// A random token, written to $TOKENHOST_CACHE/admin-token (mode 0600) for `tokenhost admin`.
std::string make_admin_token() {
  std::random_device rd;
  static const char hex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) token += hex[rd() % 16];
  const std::string dir = cache_dir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/admin-token";
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0 && ::write(fd, token.data(), token.size()) == ssize_t(token.size()) && ::close(fd) == 0 &&
      std::rename(tmp.c_str(), path.c_str()) == 0) {
    spdlog::info("admin API token generated and written to {} (set TOKENHOST_ADMIN_TOKEN or [server] admin_token to choose one)", path);
  } else {
    spdlog::warn("admin API token generated but not written to {}: {}; set TOKENHOST_ADMIN_TOKEN to choose one", path, std::strerror(errno));
  }
  return token;
}

void raise_open_file_limit(size_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted + 256) return;
  rlim_t before = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) == 0) spdlog::info("open file limit raised from {} to {}", before, lim.rlim_cur);
  if (lim.rlim_cur < wanted + 256)
    spdlog::warn("open file limit {} is low for {} HTTP threads; raise it (ulimit -n) to serve that many clients",
                 lim.rlim_cur, wanted);
}

void insert_json(toml::table& t, const std::string& key, const json& v);

toml::array json_array(const json& a) {
  toml::array out;
  for (const auto& v : a) {
    toml::table holder;
    insert_json(holder, "v", v);
    out.push_back(*holder.get("v"));
  }
  return out;
}

void insert_json(toml::table& t, const std::string& key, const json& v) {
  if (v.is_boolean()) t.insert(key, v.get<bool>());
  else if (v.is_number_integer()) t.insert(key, v.get<int64_t>());
  else if (v.is_number_float()) t.insert(key, v.get<double>());
  else if (v.is_string()) t.insert(key, v.get<std::string>());
  else if (v.is_object()) t.insert(key, json_to_toml(v));
  else if (v.is_array()) t.insert(key, json_array(v));
  else throw std::invalid_argument("config '" + key + "' is null; TOML has no null");
}

// Prompt: a string (tokenized with the served model's tokenizer) or an array of token ids.
std::optional<std::vector<int32_t>> read_prompt(const Server& server, const json& body, httplib::Response& res) {
  std::vector<int32_t> tokens;
  auto it = body.find("prompt");
  if (it == body.end()) {
    reply_error(res, 400, "missing field 'prompt'", "invalid_request_error");
    return std::nullopt;
  }
  if (it->is_string()) {
    tokens = server.encode(it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        reply_error(res, 400, "'prompt' array must hold non-negative integer token ids", "invalid_request_error");
        return std::nullopt;
      }
      tokens.push_back(int32_t(t.get<int64_t>()));
    }
  } else {
    reply_error(res, 400, "'prompt' must be a string or an array of token ids", "invalid_request_error");
    return std::nullopt;
  }
  return tokens;
}

}  // namespace

toml::table json_to_toml(const json& object) {
  toml::table t;
  for (const auto& [k, v] : object.items()) insert_json(t, k, v);
  return t;
}

HttpServers::HttpServers(Server& server) : server_(server) {
  gateway_ = std::make_unique<httplib::Server>();
  admin_ = std::make_unique<httplib::Server>();
  int threads = server_.deployment().server.http_threads;
  raise_open_file_limit(size_t(threads));
  gateway_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  admin_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  // Streamed tokens are small writes, each wanted at once: no Nagle delay behind the last one's ACK.
  gateway_->set_tcp_nodelay(true);
  admin_->set_tcp_nodelay(true);
  gateway_->set_payload_max_length(kGatewayMaxBody);
  admin_->set_payload_max_length(kAdminMaxBody);
  add_openai_routes(*gateway_, server_);

  // Every /admin/ route needs the admin token; /health and /metrics stay open for probes and scrapers.
  admin_token_ = server_.deployment().server.admin_token.empty() ? make_admin_token() : server_.deployment().server.admin_token;
  admin_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/admin/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0 && same_secret(auth.substr(7), admin_token_))
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(json{{"error", {{"message", auth.empty() ? "the admin API needs 'Authorization: Bearer <admin token>'"
                                                              : "wrong admin token"},
                                    {"type", "authentication_error"}}}}.dump(),
                    "application/json");
    spdlog::warn("admin API: refused {} {} from {} ({})", req.method, req.path, req.remote_addr, auth.empty() ? "no token" : "wrong token");
    return httplib::Server::HandlerResponse::Handled;
  });

  gateway_->Post("/v1/generate", [this](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    auto prompt = read_prompt(server_, *body, res);
    if (!prompt) return;
    GenerateRequest g;
    g.id = server_.next_request_id();
    g.prompt = std::move(*prompt);
    auto max_tokens = body->value("max_tokens", json(16));
    if (!max_tokens.is_number_integer() || max_tokens.get<int64_t>() < 1 || max_tokens.get<int64_t>() > 1 << 20) {
      return reply_error(res, 400, "'max_tokens' must be an integer in [1, 1048576]", "invalid_request_error");
    }
    g.max_tokens = uint32_t(max_tokens.get<int64_t>());
    auto priority = body->value("priority", json(0));
    if (!priority.is_number_integer()) return reply_error(res, 400, "'priority' must be an integer", "invalid_request_error");
    g.priority = int32_t(priority.get<int64_t>());
    g.session_key = req.get_header_value("X-Session-Key");
    GenerateResult r = server_.generate(std::move(g));
    if (r.finish_reason == "error") {
      return reply_error(res, server_.accepting() ? 422 : 503, r.error, "generation_error");
    }
    std::string text = server_.decode(r.tokens);
    reply_json(res, {{"tokens", r.tokens}, {"text", text}, {"finish_reason", r.finish_reason}, {"engine", r.engine}});
  });

  admin_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!server_.accepting()) return reply_error(res, 503, "shutting down", "unavailable");
    reply_json(res, {{"status", "ok"}});
  });
  admin_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(server_.metrics().prometheus_text(), "text/plain; version=0.0.4");
  });
  add_dashboard_route(*admin_);
  admin_->Get("/admin/engines", [this](const httplib::Request&, httplib::Response& res) { reply_json(res, server_.status()); });
  admin_->Get("/admin/plugins", [this](const httplib::Request&, httplib::Response& res) { reply_json(res, server_.plugins()); });
  admin_->Post("/admin/plugins", [this](const httplib::Request& req, httplib::Response& res) {
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

  auto set_slot = [this](const std::string& engine, const std::string& slot, const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    auto plugin = body->find("plugin");
    if (plugin == body->end() || !plugin->is_string())
      return reply_error(res, 400, "field 'plugin' (a plugin id string) is required", "invalid_request_error");
    for (const auto& [k, v] : body->items())
      if (k != "plugin" && k != "config")
        return reply_error(res, 400, "unknown field '" + k + "' (expected 'plugin' and 'config')", "invalid_request_error");
    json config = body->value("config", json::object());
    if (!config.is_object()) return reply_error(res, 400, "'config' must be an object", "invalid_request_error");
    try {
      std::string change = server_.set_slot(engine, slot, plugin->get<std::string>(), json_to_toml(config));
      reply_json(res, {{"ok", true}, {"change", change}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    } catch (const std::invalid_argument& e) {
      reply_error(res, 400, e.what(), "invalid_request_error");
    }
  };
  admin_->Post(R"(/admin/engines/([^/]+)/slots/([^/]+))", [set_slot](const httplib::Request& req, httplib::Response& res) {
    set_slot(req.matches[1], req.matches[2], req, res);
  });
  admin_->Post("/admin/router", [set_slot](const httplib::Request& req, httplib::Response& res) { set_slot("", "router", req, res); });
  admin_->Delete(R"(/admin/engines/([^/]+)/slots/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      reply_json(res, {{"ok", true}, {"change", server_.unload_slot(req.matches[1], req.matches[2])}});
    } catch (const AdminError& e) {
      reply_error(res, e.http_status, e.what(), "admin_error");
    }
  });
  admin_->Post("/admin/engines", [this](const httplib::Request& req, httplib::Response& res) {
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
  admin_->Delete(R"(/admin/engines/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    double grace_s = 30;
    if (req.has_param("grace_s")) {
      const std::string v = req.get_param_value("grace_s");
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
  admin_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (req.method == "GET" || req.method == "HEAD" || res.status < 400 || req.path.rfind("/admin/", 0) != 0) return;
    std::string why = res.body;
    if (auto body = json::parse(res.body, nullptr, false); body.is_object() && body.contains("error") &&
                                                           body["error"].is_object() && body["error"].contains("message"))
      why = body["error"]["message"].is_string() ? body["error"]["message"].get<std::string>() : body["error"]["message"].dump();
    spdlog::warn("admin {} {} refused ({}): {}", req.method, req.path, res.status, why);
  });
  for (auto [s, limit] : {std::pair{gateway_.get(), kGatewayMaxBody}, std::pair{admin_.get(), kAdminMaxBody}}) {
    s->set_error_handler([limit = limit](const httplib::Request& req, httplib::Response& res) {
      if (res.body.empty()) {
        std::string what = res.status == 404   ? "no route " + req.method + " " + req.path
                           : res.status == 413 ? "the request body is larger than the limit of " +
                                                     std::to_string(limit) + " bytes"
                                               : "HTTP error " + std::to_string(res.status);
        res.set_content(json{{"error", {{"message", what}, {"type", "invalid_request_error"}}}}.dump(), "application/json");
      }
    });
    s->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      spdlog::error("HTTP handler failed: {}", what);
      reply_error(res, 500, what, "internal_error");
    });
  }
}

HttpServers::~HttpServers() { stop(); }

void HttpServers::start() {
  const auto& cfg = server_.deployment().server;
  auto bind = [](httplib::Server& s, const Endpoint& e) {
    // cpp-httplib listens with a backlog of 5: a burst of clients connecting at once would see
    // refused or stalled connections. Its socket-options hook hands us the listening socket (and
    // replaces its defaults, of which SO_REUSEADDR is kept; SO_REUSEPORT is not, so a port in use
    // is an error rather than shared); once bound, listen() again with the system's largest backlog.
    int listening = -1;
    s.set_socket_options([&listening](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listening = sock;
    });
    int port = e.port == 0 ? s.bind_to_any_port(e.host) : (s.bind_to_port(e.host, e.port) ? e.port : -1);
    if (port < 0) throw std::runtime_error("cannot listen on " + e.str() + " (in use, or not an address of this machine)");
    if (listening >= 0 && ::listen(listening, SOMAXCONN) != 0)
      spdlog::warn("could not raise the listen backlog on {}: {}", e.str(), std::strerror(errno));
    return port;
  };
  gateway_port_ = bind(*gateway_, cfg.listen);
  admin_port_ = bind(*admin_, cfg.admin_listen);
  gateway_thread_ = std::thread([this] { gateway_->listen_after_bind(); });
  admin_thread_ = std::thread([this] { admin_->listen_after_bind(); });
  spdlog::info("gateway listening on {}:{}, admin API on {}:{}", cfg.listen.host, gateway_port_, cfg.admin_listen.host, admin_port_);
}

void HttpServers::stop() {
  if (gateway_) gateway_->stop();
  if (admin_) admin_->stop();
  if (gateway_thread_.joinable()) gateway_thread_.join();
  if (admin_thread_.joinable()) admin_thread_.join();
}

}  // namespace tokenhost
