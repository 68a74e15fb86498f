// `tokenhost admin guards`: the router's circuit breakers and overload policy (GET and PATCH
// /admin/guards): shows them, or changes one guard's settings live.
#include <sstream>

#include "admin/admin_client.hpp"
#include "cli/admin_command.hpp"

namespace tokenhost {
namespace {

// The guards as lines: each policy, each breaker that is not closed or has opened, what was shed.
std::string guards_text(const nlohmann::json& g) {
  std::ostringstream out;
  const auto& b = g["breakers"];
  const auto& bp = b["policy"];
  out << "breakers  " << (bp.value("enabled", false) ? "on" : "off") << "  open after " << bp.value("failures", 0)
      << " consecutive failures" << (bp.value("slow_ms", 0) > 0 ? " (or first tokens over " + std::to_string(bp.value("slow_ms", 0)) + " ms)" : "")
      << ", for " << bp.value("open_ms", 0) << " ms, then " << bp.value("probes", 0) << " probe(s)\n";
  for (const auto& e : b.value("engines", nlohmann::json::array())) {
    if (e.value("state", "") == "closed" && e.value("opened", 0) == 0) continue;
    out << "  engine " << e.value("engine", "?") << "  " << e.value("state", "?") << "  opened " << e.value("opened", 0) << " time(s)";
    if (e.contains("half_open_in_ms")) out << "  half-open in " << e.value("half_open_in_ms", 0) << " ms";
    if (e.contains("last_reason")) out << "  last: " << e.value("last_reason", "");
    out << "\n";
  }
  const auto& o = g["overload"];
  const auto& op = o["policy"];
  out << "overload  " << (op.value("enabled", false) ? "on" : "off") << "  action " << op.value("action", "?") << "  classes";
  for (const auto& c : op.value("classes", nlohmann::json::array()))
    out << " " << c.value("name", "?") << (c.contains("shed_at") ? "@" + std::to_string(int(c.value("shed_at", 0.0) * 100 + 0.5)) + "%" : "");
  out << "  default " << op.value("default_class", "-") << "\n";
  for (const char* what : {"shed", "degraded"})
    for (const auto& s : o.value(what, nlohmann::json::array()))
      out << "  " << what << " " << s.value("requests", 0) << " request(s) of class " << s.value("class", "?") << " for " << s.value("model", "?")
          << "\n";
  return out.str();
}

// --classes "batch=0.5,standard=1.0,interactive": the overload classes, lowest first.
nlohmann::json parse_classes(const std::string& text) {
  nlohmann::json out = nlohmann::json::array();
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    nlohmann::json c = {{"name", item.substr(0, eq)}};
    if (eq != std::string::npos) {
      try {
        c["shed_at"] = std::stod(item.substr(eq + 1));
      } catch (const std::exception&) {
        throw CLI::ValidationError("--classes", "'" + item + "' is not NAME=FRACTION");
      }
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

void add_guards_command(CLI::App& admin, AdminOptions& o) {
  AdminArgs& a = o.args;
  auto* guards = admin.add_subcommand("guards", "The router's circuit breakers and overload policy: show them, or change one live "
                                                "(the manifest's [breakers] and [overload] keys)");
  guards->callback([&o, guards] {
    if (!guards->get_subcommands().empty()) return;
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto g = c.get("/admin/guards");
      print_answer(opt, g, guards_text(g));
      return 0;
    };
  });
  auto* breakers = guards->add_subcommand("breakers", "Change the circuit breakers: --set enabled=true --set failures=3 "
                                                      "(failures, slow_ms, open_ms, probes); every breaker closes");
  breakers->add_option("--set", a.settings, "A setting key=value (repeatable)")->required();
  breakers->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto r = c.patch("/admin/guards", {{"breakers", parse_settings(opt.args.settings)}});
      print_answer(opt, r, guards_text(r["guards"]));
      return 0;
    };
  });
  auto* overload = guards->add_subcommand("overload", "Change the overload policy: --set enabled=true --set action=cheaper "
                                                      "(action, default_class, retry_after_s, engine_sequences) and --classes");
  overload->add_option("--set", a.settings, "A setting key=value (repeatable)");
  overload->add_option("--classes", a.config_json, "The classes, lowest first: NAME=SHED_AT,...,NAME (the last is never shed), "
                                                   "e.g. batch=0.5,standard=1,interactive");
  overload->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      nlohmann::json change = parse_settings(opt.args.settings);
      if (!opt.args.config_json.empty()) change["classes"] = parse_classes(opt.args.config_json);
      auto r = c.patch("/admin/guards", {{"overload", change}});
      print_answer(opt, r, guards_text(r["guards"]));
      return 0;
    };
  });
}

}  // namespace tokenhost
