#include "manifest/manifest_export.hpp"

#include "util/json_to_toml.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "base/kv_dtypes.hpp"
#include "plugin/kind.hpp"
#include "speculation/draft_controller.hpp"
#include "util/folders.hpp"

namespace tokenhost {
namespace {

namespace fs = std::filesystem;

toml::table slot_table(const SlotDecl& slot) {
  toml::table t;
  t.insert("plugin", slot.plugin);
  if (!slot.config.empty()) t.insert("config", slot.config);
  return t;
}

toml::table engine_table(const EngineDecl& e) {
  toml::table t;
  t.insert("model", e.model);
  t.insert("device", e.device);
  t.insert("max_step_tokens", int64_t(e.max_step_tokens));
  t.insert("max_step_seqs", int64_t(e.max_step_seqs));
  t.insert("kv_dtype", quant::dtype_name(e.kv_dtype));
  t.insert("max_draft", int64_t(e.max_draft));
  t.insert("draft_policy", draft_policy_name(e.draft_policy));
  if (e.sliding_window > 0) {
    t.insert("sliding_window", int64_t(e.sliding_window));
    t.insert("attention_sinks", int64_t(e.attention_sinks));
  }
  if (!e.partition.empty()) t.insert("partition", e.partition);
  if (!e.experts.partitions.empty()) {
    toml::array names;
    for (const auto& p : e.experts.partitions) names.push_back(p);
    t.insert("expert_partitions", std::move(names));
    t.insert("expert_replicas", int64_t(e.experts.replicas));
    t.insert("rebalance_steps", int64_t(e.experts.rebalance_steps));
  }
  if (e.role != TH_ROLE_BOTH) t.insert("role", engine_role_name(e.role));
  for (const auto& [slot, decl] : e.slots) t.insert(slot, slot_table(decl));
  for (const auto& [slot, layers] : e.stacks) {  // [[engines.NAME.slot]], in order
    toml::array a;
    for (const auto& layer : layers) a.push_back(slot_table(layer));
    t.insert(slot, std::move(a));
  }
  return t;
}

toml::table experiment_table(const experiments::ExperimentSpec& x) {
  toml::table t;
  if (!x.model.empty()) t.insert("model", x.model);
  t.insert("sticky_key", experiments::sticky_key_name(x.sticky_key));
  t.insert("allow_request_choice", x.allow_request_choice);
  t.insert("min_samples", int64_t(x.min_samples));
  toml::array arms;
  for (const auto& a : x.arms) {
    toml::table arm;
    arm.insert("name", a.name);
    if (a.router.empty()) {
      arm.insert("engine", a.engine);
    } else {
      arm.insert(experiments::router_arm_key(), a.router);
      arm.insert("config", json_to_toml(a.router_config));
    }
    arm.insert("percent", int64_t(a.percent));
    if (!a.holdback_classes.empty()) {
      toml::array classes;
      for (const auto& c : a.holdback_classes) classes.push_back(c);
      arm.insert("holdback_classes", classes);
    }
    arms.push_back(arm);
  }
  t.insert("arms", arms);
  return t;
}

}  // namespace

std::string write_manifest(const RunningDeployment& running) {
  const Deployment& d = *running.declared;
  toml::table root = d.declared;
  // The plugins in use that the catalog found outside its search paths (registered by the admin API):
  // their folders join plugin_paths.
  std::vector<std::string> search = d.catalog ? d.catalog->search_paths() : std::vector<std::string>{};
  std::vector<std::string> extra;
  auto note_folder = [&](const SlotDecl& s) {
    if (s.manifest.file.empty()) return;
    const std::string dir = fs::path(s.manifest.file).parent_path().lexically_normal().string();
    if (!inside_any_folder(dir, search) && std::find(extra.begin(), extra.end(), dir) == extra.end()) extra.push_back(dir);
  };
  toml::table engines;
  for (const auto& e : running.engines) {
    engines.insert(e.name, engine_table(e));
    for (const auto& [slot, decl] : e.slots) note_folder(decl);
    for (const auto& [slot, layers] : e.stacks)
      for (const auto& layer : layers) note_folder(layer);
  }
  root.insert_or_assign("engines", engines);
  if (!running.router.plugin.empty()) {
    root.insert_or_assign(slot_of(TH_KIND_ROUTER).name(), slot_table(running.router));
    note_folder(running.router);
  }
  if (!running.experiments.empty()) {
    toml::table experiments;
    for (const auto& x : running.experiments) experiments.insert(x.name, experiment_table(x));
    root.insert_or_assign("experiments", experiments);
  }
  // The guards as the admin API left them: a table each when on, none when off.
  root.erase("breakers");
  root.erase("overload");
  if (running.breakers.enabled) {
    nlohmann::json b = running.breakers.json();
    b.erase("enabled");
    root.insert("breakers", json_to_toml(b));
  }
  if (running.overload.enabled) {
    nlohmann::json o = running.overload.json();
    o.erase("enabled");
    root.insert("overload", json_to_toml(o));
  }
  if (!extra.empty()) {
    if (!root["server"].as_table()) root.insert("server", toml::table{});
    toml::table& server = *root["server"].as_table();
    if (!server["plugin_paths"].as_array()) server.insert("plugin_paths", toml::array{});
    for (const auto& dir : extra) server["plugin_paths"].as_array()->push_back(dir);
  }
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ostringstream out;
  out << "# The running deployment, written by tokenhost admin export at " << when << " from the server started with "
      << d.file << ".\n# Engines as the admin API left them, plugin configs whole, the running experiments with their "
         "current split.\n# Restart with it: tokenhost serve THIS_FILE\n\n"
      << root << "\n";
  return out.str();
}

}  // namespace tokenhost
