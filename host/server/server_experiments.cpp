// The Server's A/B experiment operations: start, change, stop, list, report, and the arm labels of
// /metrics. The experiments themselves (split, statistics, report) are host/experiments.
#include <spdlog/spdlog.h>

#include "server/server.hpp"
#include "util/json_to_toml.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace {

using experiments::Problem;

// One AdminError for a list of problems: the first one's status, every message with its field.
[[noreturn]] void refuse(const std::vector<Problem>& problems) {
  std::vector<std::string> parts;
  for (const auto& p : problems) {
    std::string where = experiments::path_text(p.path);
    parts.push_back(where.empty() ? p.message : where + ": " + p.message);
  }
  throw AdminError(problems.front().http_status, join(parts, "; "));
}

}  // namespace

std::vector<experiments::EngineView> Server::engine_views() const {
  std::map<std::string, std::string> models;
  for (const auto& e : engines_->live()) models[e->name()] = e->model();
  return experiments_->engine_views(models);
}

void Server::label_arms() {
  metrics::DerivedLabels labels;
  labels.key = "engine";
  labels.names = {"experiment", "arm"};
  labels.values_by_key = experiments_->arm_labels();
  metrics_.set_derived_labels(std::move(labels));
}

std::shared_ptr<PluginInstance> Server::make_arm_router(const experiments::ExperimentSpec& spec, size_t arm) {
  const experiments::ArmSpec& a = spec.arms[arm];
  const std::vector<std::string> at = {"arms", std::to_string(arm), experiments::router_arm_key()};
  LoadReply loaded = factory_->load_library(a.router);
  if (!loaded.manifest) refuse({{at, "arm '" + a.name + "': " + loaded.error, loaded.not_found ? 404 : 400}});
  SlotDecl decl;
  try {
    decl = read_slot_change(*loaded.manifest, slot_of(TH_KIND_ROUTER).name(), json_to_toml(a.router_config),
                            "experiment " + spec.name + " arm " + a.name);
  } catch (const ManifestError& e) {
    refuse({{{"arms", std::to_string(arm), "config"}, "arm '" + a.name + "': " + e.message()}});
  } catch (const std::invalid_argument& e) {
    refuse({{{"arms", std::to_string(arm), "config"}, "arm '" + a.name + "': " + e.what()}});
  }
  if (!loaded.library) refuse({{at, "arm '" + a.name + "': " + loaded.error, 422}});
  try {
    return factory_->make_instance(nullptr, slot_of(TH_KIND_ROUTER), decl, std::move(loaded.library));
  } catch (const std::exception& e) {
    refuse({{at, "arm '" + a.name + "': " + e.what(), 422}});
  }
}

void Server::start_experiment_checked(const experiments::ExperimentSpec& spec) {
  if (auto taken = experiments_->name_taken(spec.name)) refuse({*taken});
  auto views = engine_views();
  const bool routers = !spec.arms.empty() && !spec.arms.front().router.empty();
  std::string model = routers ? spec.model : "";
  for (const auto& v : views)
    if (!routers && !spec.arms.empty() && v.name == spec.arms.front().engine) model = v.model;
  auto problems = experiments::validate(spec, views, experiments_->running_on_model(model));
  if (!problems.empty()) refuse(problems);
  std::vector<std::shared_ptr<PluginInstance>> instances;
  if (routers) {
    // The arms plan the requests of a model (or group) that engines serve, each through its own router.
    if (!deployment_.groups.count(model) && engines_->engines_serving(model) == 0)
      refuse({{{"model"}, "no model or group '" + model + "' is served here", 404}});
    for (size_t i = 0; i < spec.arms.size(); ++i) instances.push_back(make_arm_router(spec, i));
  }
  if (auto p = experiments_->start(spec, model, std::move(instances))) refuse({*p});
  label_arms();
  std::vector<std::string> arms;
  for (const auto& a : spec.arms)
    arms.push_back(a.name + "=" + (a.router.empty() ? a.engine : a.router + " " + a.router_config.dump()) + " " + std::to_string(a.percent) + "%");
  spdlog::info("experiment {} started on model {}: {} (sticky by {})", spec.name, model, join(arms, ", "),
               experiments::sticky_key_name(spec.sticky_key));
}

nlohmann::json Server::experiments() const { return experiments_->list(); }

nlohmann::json Server::start_experiment(const nlohmann::json& body) {
  std::lock_guard lock(admin_mutex_);
  if (!accepting()) throw AdminError(503, "the server is shutting down");
  auto parsed = experiments::spec_from_json(body);
  if (auto* problems = std::get_if<std::vector<Problem>>(&parsed)) refuse(*problems);
  const auto& spec = std::get<experiments::ExperimentSpec>(parsed);
  start_experiment_checked(spec);
  const nlohmann::json all = experiments_->list();
  for (const auto& x : all["experiments"])
    if (x["name"] == spec.name) return x;
  return nullptr;
}

std::string Server::change_experiment(const std::string& name, const nlohmann::json& body) {
  std::lock_guard lock(admin_mutex_);
  auto problems = experiments_->change(name, body, engine_views());
  if (!problems.empty()) refuse(problems);
  label_arms();
  std::string split;
  const nlohmann::json all = experiments_->list();
  for (const auto& x : all["experiments"])
    if (x["name"] == name)
      for (const auto& a : x["arms"]) split += (split.empty() ? "" : ", ") + a["name"].get<std::string>() + " " + std::to_string(a["percent"].get<int>()) + "%";
  spdlog::info("experiment {}: split now {}", name, split);
  return "experiment " + name + ": " + split;
}

std::string Server::stop_experiment(const std::string& name) {
  std::lock_guard lock(admin_mutex_);
  if (auto p = experiments_->stop(name)) refuse({*p});
  label_arms();
  spdlog::info("experiment {} stopped; its report stays readable", name);
  return "experiment " + name + " stopped; its report stays readable until the server stops";
}

nlohmann::json Server::experiment_report(const std::string& name) const {
  auto report = experiments_->report(name);
  if (!report) throw AdminError(404, "no experiment '" + name + "'");
  return *report;
}

}  // namespace tokenhost
