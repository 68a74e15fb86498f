#include "cli/admin_command.hpp"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <toml++/toml.h>

#include "admin/admin_client.hpp"
#include "plugin/kind.hpp"
#include "util/atomic_file.hpp"

namespace tokenhost {

nlohmann::json parse_settings(const std::vector<std::string>& items) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw CLI::ValidationError("--set", "'" + item + "' is not key=value");
    std::string value = item.substr(eq + 1);
    nlohmann::json v = nlohmann::json::parse(value, nullptr, false);
    out[item.substr(0, eq)] = v.is_discarded() || v.is_object() || v.is_array() ? nlohmann::json(value) : v;
  }
  return out;
}

void print_answer(const AdminOptions& options, const nlohmann::json& answer, const std::string& summary) {
  if (options.json)
    std::cout << answer.dump(2) << "\n";
  else
    std::cout << summary << (summary.empty() || summary.back() == '\n' ? "" : "\n");
}

namespace {

std::string plugin_text(const nlohmann::json& p) {
  if (!p.is_object()) return "-";
  return p.value("id", "?") + " " + p.value("version", "?");
}

// One block per engine: its model, device, plugins, load; then the models' memory and the router.
std::string status_text(const nlohmann::json& s) {
  std::ostringstream out;
  for (const auto& e : s.value("engines", nlohmann::json::array())) {
    out << "engine " << e.value("name", "?") << "  model " << e.value("model", "?") << "  device " << e.value("device", "?")
        << (e.contains("node") ? "  on node " + e.value("node", "?") : std::string()) << (e.value("draining", false) ? "  (draining)" : "")
        << "\n";
    out << "  sequences " << e.value("sequences", 0) << "  steps " << e.value("steps", 0) << "  tokens out "
        << e.value("tokens_out", 0) << "\n";
    for (const std::string& slot : engine_slot_names())
      if (e.contains(slot) && e[slot].is_object())
        out << "  " << slot << std::string(12 - slot.size(), ' ') << plugin_text(e[slot]) << "\n";
    if (e.contains("kv") && e["kv"].is_object())
      out << "  kv blocks   " << e["kv"].value("free_blocks", 0) << " free of " << e["kv"].value("total_blocks", 0) << " ("
          << e["kv"].value("block_size", 0) << " positions each, " << e["kv"].value("dtype", "?") << ")\n";
    if (e.contains("kv_connectors") && e["kv_connectors"].is_object()) {  // the stack's layers, first asked first
      for (const auto& l : e["kv_connectors"].value("layers", nlohmann::json::array()))
        out << "  kv_connector " << l.value("tier", 0) << "  " << plugin_text(l) << "  stored " << l.value("stored_blocks", 0)
            << " blocks  saved " << l.value("saved_blocks", 0) << "  loaded " << l.value("loaded_blocks", 0) << "  hits "
            << l.value("hits", 0) << "  failed loads " << l.value("load_failures", 0) << "\n";
      if (e["kv_connectors"].contains("idle")) out << "  kv_connector idle: " << e["kv_connectors"].value("idle", "") << "\n";
    }
  }
  for (const auto& m : s.value("models", nlohmann::json::array())) {
    char mib[64];
    std::snprintf(mib, sizeof mib, "%.1f MiB (+%.1f MiB packed)", m.value("weights_bytes", 0.0) / (1 << 20),
                  m.value("packed_bytes", 0.0) / (1 << 20));
    out << "model " << m.value("name", "?") << "  " << m.value("weight_dtype", "?") << "  " << mib << "  "
        << (m["path"].is_string() ? m["path"].get<std::string>() : m.value("source", "?")) << "\n";
  }
  for (const auto& e : s.value("retiring_engines", nlohmann::json::array()))
    out << "engine " << e.value("name", "?") << " (retiring: replaced or removed)  sequences " << e.value("sequences", 0) << "\n";
  if (s.contains("router")) out << "router " << plugin_text(s["router"].value("router", nlohmann::json())) << "\n";
  if (s.contains("cluster") && s["cluster"].is_object()) {
    const auto& c = s["cluster"];
    out << "node " << c.value("node", "?") << (c.value("tls", true) ? "  (mutual TLS)" : "  (TLS OFF)");
    if (c.contains("listen")) out << "  takes heads on " << c.value("listen", "?");
    out << "\n";
    for (const auto& w : c.value("workers", nlohmann::json::array())) {
      char rtt[32];
      std::snprintf(rtt, sizeof rtt, "%.2f", w.value("rtt_ms", 0.0));
      out << "  worker " << w.value("name", "?") << "  " << w.value("state", "?") << "  rtt " << rtt << " ms  last heartbeat "
          << (w["last_heartbeat_ms_ago"].is_number() ? std::to_string(w["last_heartbeat_ms_ago"].get<int64_t>()) + " ms ago" : "never")
          << "  sent " << w.value("messages_sent", 0) << " msgs " << w.value("bytes_sent", 0) << " B  received "
          << w.value("messages_received", 0) << " msgs " << w.value("bytes_received", 0) << " B";
      for (const auto& e : w.value("engines", nlohmann::json::array())) out << "  engine " << e.value("name", "?");
      if (w.contains("why")) out << "  (" << w.value("why", "") << ")";
      out << "\n";
    }
  }
  out << "in flight " << s.value("in_flight", 0) << ", open plugin libraries " << s.value("open_libraries", 0);
  return out.str();
}

}  // namespace

CLI::App* add_admin_command(CLI::App& app, AdminOptions& o) {
  AdminArgs& a = o.args;
  auto* admin = app.add_subcommand("admin", "Operate a running server through its admin API: status, plugins, live swaps, "
                                            "engines, experiments.\nThe token comes from --token, $TOKENHOST_ADMIN_TOKEN, "
                                            "or the file the server wrote ($TOKENHOST_CACHE/admin-token-PORT, PORT the admin API's).");
  admin->require_subcommand(1);
  admin->add_option("--url", o.url,
                    "The admin API's base URL (default: $TOKENHOST_ADMIN_URL, else --manifest's admin_listen, else "
                    "http://127.0.0.1:8081)");
  admin->add_option("--manifest", o.manifest, "The deployment manifest the server runs: its [server] admin_listen (https with "
                                              "admin_tls_certificate) gives the URL")
      ->check(CLI::ExistingFile);
  admin->add_option("--token", o.token, "The admin token");
  admin->add_option("--cacert", o.ca_file, "With an https:// URL: PEM certificates to trust for the server's (default: the system's)")
      ->check(CLI::ExistingFile);
  admin->add_flag("--insecure", o.insecure, "With an https:// URL: take any certificate (encrypted, not authenticated)");
  admin->add_flag("--json", o.json, "Print the server's JSON answers");

  admin->add_subcommand("status", "Engines, their plugins and versions, the router")->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto s = c.get("/admin/engines");
      print_answer(opt, s, status_text(s));
      return 0;
    };
  });

  auto* plugins = admin->add_subcommand("plugins", "Plugins the server knows and the libraries it has open");
  plugins->require_subcommand(1);
  plugins->add_subcommand("list", "Every plugin in the server's catalog")->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto p = c.get("/admin/plugins");
      std::ostringstream out;  // a line per plugin: id, version, kind, ABI, library; then what went wrong
      for (const auto& m : p.value("plugins", nlohmann::json::array()))
        out << m.value("id", "?") << "  " << m.value("version", "?") << "  " << m.value("kind", "?") << "  ABI "
            << m.value("abi", "?") << "  " << m.value("library", "") << "\n";
      out << p.value("open_libraries", 0) << " libraries open\n";
      for (const auto& e : p.value("errors", nlohmann::json::array())) out << "skipped: " << (e.is_string() ? e.get<std::string>() : e.dump()) << "\n";
      for (const auto& f : p.value("faults", nlohmann::json::array())) out << "fault: " << (f.is_string() ? f.get<std::string>() : f.dump()) << "\n";
      print_answer(opt, p, out.str());
      return 0;
    };
  });
  auto* load = plugins->add_subcommand("load", "Make a plugin (or a new version of one) known from its plugin.toml; "
                                               "swap it in with `admin swap`");
  load->add_option("manifest", a.manifest, "The plugin.toml (a path on the server's machine)")->required();
  load->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      auto path = std::filesystem::absolute(a.manifest).string();
      auto r = c.post("/admin/plugins", {{"manifest", path}});
      print_answer(opt, r, "registered " + r.value("id", "?") + " from " + path);
      return 0;
    };
  });

  auto* exported = admin->add_subcommand(
      "export", "Write the running deployment (plugins and configs as swapped, engines added or removed, running "
                "experiments with their split) as a manifest: `tokenhost serve FILE` starts the same deployment");
  exported->add_option("-o,--output", a.output, "The file to write, whole or not at all (default: standard output)");
  exported->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto r = c.get("/admin/export");
      const std::string manifest = r.value("manifest", "");
      if (opt.args.output.empty()) {
        std::cout << manifest;
      } else {
        write_file_atomically(opt.args.output, manifest, 0600);  // it may hold [server]'s keys and token
        std::cerr << "wrote the running deployment to " << opt.args.output << "; restart with: tokenhost serve "
                  << opt.args.output << "\n";
      }
      return 0;
    };
  });

  auto* swap = admin->add_subcommand("swap", "Put PLUGIN into SLOT of ENGINE while it serves (attention, kvcache, "
                                             "scheduler, moe, spec_decode). The new plugin is loaded and checked "
                                             "first; a refusal changes nothing.");
  swap->add_option("engine", a.engine, "Engine name")->required();
  swap->add_option("slot", a.slot, "Slot name")->required();
  swap->add_option("plugin", a.plugin, "Plugin id, e.g. attention.cpu_flash")->required();
  swap->add_option("--set", a.settings, "A config setting key=value (repeatable)");
  swap->add_option("--config", a.config_json, "The whole config as a JSON object");
  swap->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      nlohmann::json config = a.config_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(a.config_json, nullptr, false);
      if (config.is_discarded() || !config.is_object()) throw CLI::ValidationError("--config", "not a JSON object");
      config.update(parse_settings(a.settings));
      auto r = c.post("/admin/engines/" + a.engine + "/slots/" + a.slot, {{"plugin", a.plugin}, {"config", config}});
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* layer = admin->add_subcommand("layer", "Change one layer of a stacking SLOT of ENGINE (kv_connector) while it serves: "
                                               "insert PLUGIN (at --at N, else after the last), replace layer N with PLUGIN, or remove "
                                               "layer N. Layers count from 0, the first asked first.");
  layer->add_option("action", a.layer_op, "insert, replace or remove")->required()->check(CLI::IsMember({"insert", "replace", "remove"}));
  layer->add_option("engine", a.engine, "Engine name")->required();
  layer->add_option("slot", a.slot, "Slot name (kv_connector)")->required();
  layer->add_option("plugin", a.plugin, "Plugin id (insert, replace), e.g. kv_connector.disk");
  layer->add_option("--at", a.layer, "The layer's position (replace and remove need it)");
  layer->add_option("--set", a.settings, "A config setting key=value (repeatable)");
  layer->add_option("--config", a.config_json, "The whole config as a JSON object");
  layer->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      if (a.layer_op != "insert" && a.layer < 0) throw CLI::ValidationError("--at", a.layer_op + " needs the layer's position");
      if (a.layer_op != "remove" && a.plugin.empty()) throw CLI::ValidationError("plugin", a.layer_op + " needs a plugin id");
      const std::string path = "/admin/engines/" + a.engine + "/slots/" + a.slot + "/layers" +
                               (a.layer >= 0 ? "/" + std::to_string(a.layer) : "") + (a.layer_op == "insert" && a.layer >= 0 ? "?insert=1" : "");
      if (a.layer_op == "remove") {
        auto r = c.del(path);
        print_answer(opt, r, r.value("change", "done"));
        return 0;
      }
      nlohmann::json config = a.config_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(a.config_json, nullptr, false);
      if (config.is_discarded() || !config.is_object()) throw CLI::ValidationError("--config", "not a JSON object");
      config.update(parse_settings(a.settings));
      auto r = c.post(path, {{"plugin", a.plugin}, {"config", config}});
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* unload = admin->add_subcommand("unload", "Empty an optional SLOT of ENGINE (spec_decode)");
  unload->add_option("engine", a.engine, "Engine name")->required();
  unload->add_option("slot", a.slot, "Slot name")->required();
  unload->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      auto r = c.del("/admin/engines/" + a.engine + "/slots/" + a.slot);
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* flush = admin->add_subcommand("flush-prefix-cache",
                                      "Drop the prefix cache of ENGINE: the cached KV blocks no request holds are freed "
                                      "(its kvcache plugin must cache prefixes, e.g. kvcache.prefix)");
  flush->add_option("engine", a.engine, "Engine name")->required();
  flush->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto r = c.post("/admin/engines/" + opt.args.engine + "/prefix_cache/flush", nlohmann::json::object());
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* router = admin->add_subcommand("router", "Swap the router plugin");
  router->add_option("plugin", a.plugin, "Plugin id, e.g. router.round_robin")->required();
  router->add_option("--set", a.settings, "A config setting key=value (repeatable)");
  router->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      auto r = c.post("/admin/router", {{"plugin", a.plugin}, {"config", parse_settings(a.settings)}});
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });

  auto* engines = admin->add_subcommand("engines", "Add or remove engines while the server runs");
  engines->require_subcommand(1);
  auto* add = engines->add_subcommand("add", "Start the engines FILE declares ([engines.NAME] tables in the manifest "
                                             "format, on models the server has)");
  add->add_option("file", a.file, "A TOML file with [engines.NAME] tables")->required()->check(CLI::ExistingFile);
  add->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      std::ifstream in(a.file);
      std::string text((std::istreambuf_iterator<char>(in)), {});
      auto r = c.post("/admin/engines", {{"toml", text}, {"file", a.file}});
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* remove = engines->add_subcommand("remove", "Stop routing to ENGINE, let its running requests finish, then stop it");
  remove->add_option("engine", a.engine, "Engine name")->required();
  remove->add_option("--grace", a.grace_s, "Seconds its running requests may take before they end with an error")->capture_default_str();
  remove->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      auto r = c.del("/admin/engines/" + a.engine + "?grace_s=" + std::to_string(a.grace_s));
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  add_ab_command(*admin, o);
  add_guards_command(*admin, o);
  return admin;
}

// The admin API's URL: --url, $TOKENHOST_ADMIN_URL, the manifest's [server] admin_listen, or the default's.
std::string admin_url(const AdminOptions& o) {
  if (!o.url.empty()) return o.url;
  if (const char* env = std::getenv("TOKENHOST_ADMIN_URL"); env != nullptr && *env) return env;
  if (!o.manifest.empty()) {
    toml::table doc;
    try {
      doc = toml::parse_file(o.manifest);
    } catch (const toml::parse_error& e) {
      throw std::invalid_argument(o.manifest + ": " + std::string(e.description()));
    }
    std::string listen = doc["server"]["admin_listen"].value_or(std::string("127.0.0.1:8081"));
    if (listen.rfind("0.0.0.0:", 0) == 0) listen = "127.0.0.1" + listen.substr(7);  // every address: this machine's loopback too
    const bool tls = doc["server"]["admin_tls_certificate"].is_string();
    return (tls ? "https://" : "http://") + listen;
  }
  return "http://127.0.0.1:8081";
}

int run_admin(const AdminOptions& options) {
  if (!options.action) return 1;
  try {
    const std::string url = admin_url(options);
    AdminClient client(url, find_admin_token(options.token, url), options.ca_file, options.insecure);
    return options.action(client, options);
  } catch (const AdminCallError& e) {
    std::cerr << "tokenhost admin: " << e.what() << "\n";
    return 1;
  } catch (const CLI::ValidationError& e) {
    std::cerr << "tokenhost admin: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "tokenhost admin: --url: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace tokenhost
