// `tokenhost admin ab list|start|set|stop|report`: A/B experiments through the admin API
// (/admin/experiments), with the report as a table of arms (n, means with 95% intervals) and verdicts.
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "admin/admin_client.hpp"
#include "cli/admin_command.hpp"

namespace tokenhost {
namespace {

using nlohmann::json;

// "NAME=VALUE" -> {NAME, VALUE}; a CLI::ValidationError naming the option otherwise.
std::pair<std::string, std::string> split_pair(const std::string& option, const std::string& item) {
  auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
    throw CLI::ValidationError(option, "'" + item + "' is not NAME=VALUE");
  return {item.substr(0, eq), item.substr(eq + 1)};
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

int percent_of(const std::string& option, const std::string& text) {
  try {
    size_t used = 0;
    int p = std::stoi(text, &used);
    if (used == text.size()) return p;
  } catch (const std::exception&) {
  }
  throw CLI::ValidationError(option, "'" + text + "' is not an integer percent");
}

// --holdback ARM=class,class as {arm: [classes]}.
std::map<std::string, std::vector<std::string>> holdbacks(const std::vector<std::string>& items) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& item : items) {
    auto [arm, classes] = split_pair("--holdback", item);
    out[arm] = split_list(classes);
  }
  return out;
}

std::string ms(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v.get<double>() * 1000);
  return buf;
}

// "12.34 [11.90, 12.80]" in milliseconds.
std::string mean_ci(const json& m) {
  if (!m.is_object() || m.value("n", 0) == 0) return "-";
  std::string out = ms(m["mean"]);
  if (m["ci95"].is_array()) out += " [" + ms(m["ci95"][0]) + ", " + ms(m["ci95"][1]) + "]";
  return out;
}

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::ostringstream out;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) out << (i ? "  " : "") << std::left << std::setw(int(i + 1 < r.size() ? width[i] : 0)) << r[i];
    out << "\n";
  }
  return out.str();
}

std::string report_text(const json& r) {
  std::ostringstream out;
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.1f", r.value("elapsed_s", 0.0));
  out << "experiment " << r.value("name", "?") << " (" << r.value("state", "?") << ", " << elapsed << " s, model "
      << r.value("model", "?") << ")\n\n";
  std::vector<std::vector<std::string>> arms = {{"arm", "engine", "%", "requests", "failed", "tokens", "tok/s",
                                                 "engine tok/s", "tok/step", "step ms", "ttft ms [95% CI]", "itl ms [95% CI]",
                                                 "e2e ms [95% CI]", "drafts kept", "prefix hits"}};
  // Speculation: the share of draft tokens kept, of how many; prefix caching: prompts that found a
  // cached prefix, of those looked up ("-" for an arm that did neither).
  auto drafts_kept = [](const json& s) -> std::string {
    if (!s.is_object() || s.value("draft_tokens", 0) == 0) return "-";
    char text[64];
    std::snprintf(text, sizeof text, "%.0f%% of %llu", 100.0 * s.value("accepted_tokens", 0.0) / s.value("draft_tokens", 1.0),
                  static_cast<unsigned long long>(s.value("draft_tokens", 0)));
    return text;
  };
  auto prefix_hits = [](const json& p) -> std::string {
    if (!p.is_object() || p.value("lookups", 0) == 0) return "-";
    return std::to_string(p.value("hits", 0)) + "/" + std::to_string(p.value("lookups", 0));
  };
  for (const auto& a : r.value("arms", json::array())) {
    char tput[32], per_step[32] = "-", engine_tput[32] = "-";
    std::snprintf(tput, sizeof tput, "%.1f", a.value("throughput_tok_s", 0.0));
    const json load = a.value("load", json::object());
    if (load.value("engine_tok_s", json()).is_number())
      std::snprintf(engine_tput, sizeof engine_tput, "%.1f", load["engine_tok_s"].get<double>());
    if (load.value("tokens_per_step", json()).is_number())
      std::snprintf(per_step, sizeof per_step, "%.1f", load["tokens_per_step"].get<double>());
    arms.push_back({a.value("name", "?"), a.value("engine", "?"), std::to_string(a.value("percent", 0)),
                    std::to_string(a.value("requests", 0)), std::to_string(a.value("failed", 0)),
                    std::to_string(a.value("tokens_out", 0)), tput, engine_tput, per_step, ms(load.value("step_s_mean", json())),
                    mean_ci(a["ttft_s"]), mean_ci(a["itl_s"]), mean_ci(a["e2e_s"]),
                    drafts_kept(a.value("speculation", json())), prefix_hits(a.value("prefix_cache", json()))});
  }
  out << table(arms);
  std::vector<std::vector<std::string>> cmp = {{"metric", "vs", "diff ms [95% CI]", "p", "verdict"}};
  for (const auto& c : r.value("comparisons", json::array())) {
    char p[32] = "-";
    if (c["p_value"].is_number()) std::snprintf(p, sizeof p, "%.3g", c["p_value"].get<double>());
    std::string diff = ms(c["diff"]);
    if (c["ci95"].is_array()) diff += " [" + ms(c["ci95"][0]) + ", " + ms(c["ci95"][1]) + "]";
    cmp.push_back({c.value("metric", "?"), c.value("candidate", "?") + " vs " + c.value("baseline", "?"), diff, p,
                   c.value("verdict", "")});
  }
  if (cmp.size() > 1) out << "\n" << table(cmp);
  for (const auto& n : r.value("notes", json::array())) out << "\nnote: " << n.get<std::string>() << "\n";
  return out.str();
}

std::string list_text(const json& l) {
  std::vector<std::vector<std::string>> rows = {{"experiment", "state", "sticky", "arms"}};
  for (const auto& x : l.value("experiments", json::array())) {
    std::string arms;
    for (const auto& a : x.value("arms", json::array())) {
      arms += (arms.empty() ? "" : ", ") + a.value("name", "?") + "=" + a.value("engine", "?") + " " + std::to_string(a.value("percent", 0)) + "%";
      auto h = a.value("holdback_classes", std::vector<std::string>{});
      if (!h.empty()) {
        std::string classes;
        for (const auto& c : h) classes += (classes.empty() ? "" : ",") + c;
        arms += " (not " + classes + ")";
      }
    }
    rows.push_back({x.value("name", "?"), x.value("state", "?"), x.value("sticky_key", "?"), arms});
  }
  return rows.size() == 1 ? "no experiments" : table(rows);
}

}  // namespace

void add_ab_command(CLI::App& admin, AdminOptions& o) {
  AdminArgs& a = o.args;
  auto* ab = admin.add_subcommand("ab", "A/B experiments between engines of one model: split traffic, compare arms");
  ab->require_subcommand(1);
  ab->add_subcommand("list", "Experiments, running and stopped, with their arms and split")->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto l = c.get("/admin/experiments");
      print_answer(opt, l, list_text(l));
      return 0;
    };
  });
  auto* start = ab->add_subcommand("start", "Start experiment NAME: --arm a=ENGINE:PERCENT for each arm, the first the baseline");
  start->add_option("name", a.experiment, "Experiment name")->required();
  start->add_option("--arm", a.arms, "ARM=ENGINE:PERCENT (repeat for each arm)")->required();
  start->add_option("--holdback", a.holdbacks, "ARM=CLASS[,CLASS]: requests of those classes never go to ARM");
  start->add_option("--sticky", a.sticky_key, "What keeps a client on one arm: session, user, api_key, none")->capture_default_str();
  start->add_flag("--allow-request-choice", a.allow_request_choice, "Let a request pick its arm (\"tokenhost\": {\"arm\": ...})");
  start->add_option("--min-samples", a.min_samples, "Samples per arm and metric before any verdict (server default 30)");
  start->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      auto held = holdbacks(a.holdbacks);
      json arms = json::array();
      for (const auto& item : a.arms) {
        auto [name, rest] = split_pair("--arm", item);
        auto colon = rest.rfind(':');
        if (colon == std::string::npos) throw CLI::ValidationError("--arm", "'" + item + "' is not ARM=ENGINE:PERCENT");
        json arm = {{"name", name}, {"engine", rest.substr(0, colon)}, {"percent", percent_of("--arm", rest.substr(colon + 1))}};
        if (held.count(name)) arm["holdback_classes"] = held[name];
        arms.push_back(arm);
      }
      json body = {{"name", a.experiment}, {"sticky_key", a.sticky_key}, {"arms", arms}, {"allow_request_choice", a.allow_request_choice}};
      if (a.min_samples > 0) body["min_samples"] = a.min_samples;
      auto r = c.post("/admin/experiments", body);
      print_answer(opt, r, "started experiment " + a.experiment + "\n" + list_text({{"experiments", {r["experiment"]}}}));
      return 0;
    };
  });
  auto* set = ab->add_subcommand("set", "Change the split of running experiment NAME");
  set->add_option("name", a.experiment, "Experiment name")->required();
  set->add_option("--arm", a.arms, "ARM=PERCENT (repeat; arms not named keep theirs)");
  set->add_option("--holdback", a.holdbacks, "ARM=CLASS[,CLASS]: the classes ARM is held back from, replacing its list");
  set->add_option("--no-holdback", a.no_holdback, "ARM: hold ARM back from no class");
  set->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      const AdminArgs& a = opt.args;
      std::map<std::string, json> changes;
      for (const auto& item : a.arms) {
        auto [name, percent] = split_pair("--arm", item);
        changes[name]["percent"] = percent_of("--arm", percent);
      }
      for (const auto& [name, classes] : holdbacks(a.holdbacks)) changes[name]["holdback_classes"] = classes;
      for (const auto& name : a.no_holdback) changes[name]["holdback_classes"] = json::array();
      if (changes.empty()) throw CLI::ValidationError("set", "nothing to change: give --arm, --holdback or --no-holdback");
      json arms = json::array();
      for (auto& [name, change] : changes) {
        change["name"] = name;
        arms.push_back(change);
      }
      auto r = c.patch("/admin/experiments/" + a.experiment, {{"arms", arms}});
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* stop = ab->add_subcommand("stop", "Stop experiment NAME (its report stays readable)");
  stop->add_option("name", a.experiment, "Experiment name")->required();
  stop->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto r = c.del("/admin/experiments/" + opt.args.experiment);
      print_answer(opt, r, r.value("change", "done"));
      return 0;
    };
  });
  auto* report = ab->add_subcommand("report", "Per-arm latency and throughput with 95% intervals, and verdicts");
  report->add_option("name", a.experiment, "Experiment name")->required();
  report->callback([&o] {
    o.action = [](AdminClient& c, const AdminOptions& opt) {
      auto r = c.get("/admin/experiments/" + opt.args.experiment + "/report");
      print_answer(opt, r, report_text(r));
      return 0;
    };
  });
}

}  // namespace tokenhost
