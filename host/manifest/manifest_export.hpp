// The running deployment written back as a manifest that `tokenhost serve` accepts and that reproduces
// it (`tokenhost admin export`, GET /admin/export): [server], [limits] and [models] as declared (paths
// absolute), every engine as the admin API last left it (its plugins and their whole configs), the
// router, and the running experiments with their current split. The folders of plugins registered
// from outside the plugin paths join [server] plugin_paths, so that serve finds them.
#pragma once

#include <string>
#include <vector>

#include "experiments/experiment.hpp"
#include "manifest/deployment.hpp"

namespace tokenhost {

struct RunningDeployment {
  const Deployment* declared = nullptr;  // its `declared` tables and its catalog's search paths
  std::vector<EngineDecl> engines;
  SlotDecl router;
  std::vector<experiments::ExperimentSpec> experiments;  // running ones
  // The guards' policies in force ([breakers], [overload]: written when enabled).
  routing::BreakerPolicy breakers;
  routing::OverloadPolicy overload;
};

// The manifest's text, with a header comment saying what it is and when it was written.
std::string write_manifest(const RunningDeployment& running);

}  // namespace tokenhost
