// The experiments of a server: their definitions and state (running, stopped), the per-arm
// measurements, and the report. The router asks it where each request goes and tells it how each
// ended; the admin API starts, changes and stops experiments and reads reports. Thread-safe: every
// member may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/experiment.hpp"
#include "experiments/statistics.hpp"
#include "metrics/metrics.hpp"
#include "plugin/instance.hpp"

namespace tokenhost::experiments {

// What the router knows of a request that matters to an experiment.
struct RequestKeys {
  std::string model;
  std::string session;        // X-Session-Key header, else the `user` field
  std::string user;           // the `user` field
  std::string api_key;        // the gateway request's bearer token
  std::string arm;            // an arm the request asks for ("tokenhost": {"arm": ...}), "" none
  std::string request_class;  // "tokenhost": {"class": ...}, "" none
};

struct Experiment;

// Where a request went. `kind` says whether it counts in the comparison.
// displaced: its assigned arm's engine was down, and another arm served it (counted in the down
// arm's gap, not compared).
struct Routing {
  enum class Kind { compared, held_back, chosen, displaced };
  std::shared_ptr<Experiment> experiment;
  size_t arm = 0;
  std::string engine;  // an engine arm's; "" for a router arm
  std::shared_ptr<PluginInstance> router;  // a router arm's instance, which plans the request; NULL for an engine arm
  Kind kind = Kind::compared;
};

// How a request ended, as the engine measured it.
struct Outcome {
  bool failed = false;     // ended with an error
  bool completed = false;  // ended by length or end of sequence (not cancelled, not failed)
  uint32_t tokens_out = 0;
  std::optional<double> ttft_s, itl_s, e2e_s;  // itl_s: the request's mean inter-token gap
  // A router's cache answered it: counted apart, and out of the latency comparison (no engine ran).
  bool cached = false;
  double cost = 0;  // the cost the router accounted (GenerateResult::cost)
};

// Values of the metrics of one engine (see metrics::Registry::values_where): its plugin metrics
// (tokenhost_plugin_*) and its step metrics (tokenhost_step_*, from which a report tells each arm's load).
using MetricValues = std::map<std::string, metrics::SeriesValue>;
using MetricReader = std::function<MetricValues(const std::string& engine)>;

class ExperimentTable {
 public:
  // read_metrics gives an engine's metrics now; may be empty (no plugin metrics, no steps yet).
  explicit ExperimentTable(MetricReader read_metrics = {});

  // Starts spec, which the caller has validated against the server's engines (validate() with
  // engine_views() of the engines). Refuses (Problem, 409) a name in use by a running or stopped one.
  // routers: a router arm's instance per arm (empty for engine arms); the router calls them.
  std::optional<Problem> start(const ExperimentSpec& spec, const std::string& model,
                               std::vector<std::shared_ptr<PluginInstance>> routers = {});
  // A Problem (409) when an experiment, running or stopped, has this name.
  std::optional<Problem> name_taken(const std::string& name) const;
  // Applies a split change (the admin API's PATCH body) when it is valid against engines. Nothing
  // changes when problems are returned.
  std::vector<Problem> change(const std::string& name, const nlohmann::json& body, const std::vector<EngineView>& engines);
  // Stops a running experiment; its report stays readable. A Problem (404) when there is none.
  std::optional<Problem> stop(const std::string& name);

  // Validation context: the engines as views with the running experiment each is an arm of, and the
  // running experiments on a model.
  std::vector<EngineView> engine_views(const std::map<std::string, std::string>& engine_models) const;
  std::vector<std::string> running_on_model(const std::string& model) const;
  // The running experiment engine is an arm of, "" if none.
  std::string experiment_of_engine(const std::string& engine) const;

  // The router: where a request for keys.model goes, or nullopt when no experiment runs on the model.
  // A requested arm the experiment does not allow or have is an error (the returned string).
  std::variant<std::monostate, Routing, std::string> route(const RequestKeys& keys) const;
  // Why a request asking for arm `arm` of model `model` would be refused, or "" when it would not.
  std::string check_choice(const std::string& model, const std::string& arm) const;
  void record(const Routing& routing, const Outcome& outcome);
  // Engine `engine` stopped unasked (the router saw it) / serves again (rebuilt): while it is down,
  // the requests its arms would get go to the experiment's other arms, and each arm's report lists its
  // gaps (from, to, why, the requests displaced).
  void engine_down(const std::string& engine, const std::string& reason);
  void engine_up(const std::string& engine);

  // GET /admin/experiments, and one experiment's report (nullopt: no such experiment).
  nlohmann::json list() const;
  std::optional<nlohmann::json> report(const std::string& name) const;
  // The running experiments' definitions, their split as it is now (for admin export).
  std::vector<ExperimentSpec> running_specs() const;
  // engine -> {experiment, arm} for the engines that are arms of running experiments.
  std::map<std::string, std::vector<std::string>> arm_labels() const;

 private:
  std::shared_ptr<Experiment> find_locked(const std::string& name) const;
  std::optional<Problem> name_taken_locked(const std::string& name) const;
  MetricReader read_metrics_;
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Experiment>> experiments_;  // in start order
};

}  // namespace tokenhost::experiments
