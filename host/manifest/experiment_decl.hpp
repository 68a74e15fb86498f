// [experiments.NAME] tables of a deployment manifest: A/B experiments that start with the server.
//
//   [experiments.sched]
//   sticky_key = "session"             # session (X-Session-Key, else user), user, api_key, none
//   allow_request_choice = true        # a request may pick its arm: "tokenhost": {"arm": "b"}
//   min_samples = 30                   # per arm and metric before any verdict
//   arms = [{ name = "a", engine = "cont", percent = 50 },
//           { name = "b", engine = "static", percent = 50, holdback_classes = ["batch"] }]
//
// The same fields as the admin API's POST /admin/experiments, checked the same way
// (experiments::validate), each error located at file:line:column.
#pragma once

#include <vector>

#include "experiments/experiment.hpp"
#include "util/toml_reader.hpp"

namespace tokenhost {

struct EngineDecl;

// Reads the [experiments] table of r's document against the engines the manifest declares.
// Throws ManifestError.
std::vector<experiments::ExperimentSpec> read_experiments(const TomlReader& r, const toml::table& experiments,
                                                          const std::map<std::string, EngineDecl>& engines);

}  // namespace tokenhost
