// The plugin registry actor: owns the catalog of plugin manifests (what can be loaded) and opens
// plugin libraries for the server, re-reading a plugin's plugin.toml each time so that a version
// installed at the same path since is the one loaded.
#pragma once

#include <memory>

#include "actors/messages.hpp"
#include "plugin/catalog.hpp"

namespace tokenhost {

registry_actor spawn_registry(caf::actor_system& sys, std::shared_ptr<PluginCatalog> catalog);

}  // namespace tokenhost
