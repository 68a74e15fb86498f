// The Server's A/B experiment operations: start, change, stop, list, report, and the arm labels of
// /metrics. The experiments themselves (split, statistics, report) are host/experiments.
#include <spdlog/spdlog.h>

#include "server/server.hpp"
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

void Server::start_experiment_checked(const experiments::ExperimentSpec& spec) {
  if (auto taken = experiments_->name_taken(spec.name)) refuse({*taken});
  auto views = engine_views();
  std::string model;
  for (const auto& v : views)
    if (!spec.arms.empty() && v.name == spec.arms.front().engine) model = v.model;
  auto problems = experiments::validate(spec, views, experiments_->running_on_model(model));
  if (!problems.empty()) refuse(problems);
  if (auto p = experiments_->start(spec, model)) refuse({*p});
  label_arms();
  std::vector<std::string> arms;
  for (const auto& a : spec.arms) arms.push_back(a.name + "=" + a.engine + " " + std::to_string(a.percent) + "%");
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
