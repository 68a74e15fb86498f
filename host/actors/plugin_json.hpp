// How actors describe the plugin instance in a slot for the admin API.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "plugin/instance.hpp"

namespace tokenhost {

// id, version, the library file it came from and the private copy mapped now; null for an empty slot.
inline nlohmann::json plugin_json(const PluginInstance* p) {
  if (p == nullptr) return nullptr;
  return {{"id", p->id()},
          {"version", p->version()},
          {"library", p->library().manifest().library},
          {"mapped_path", p->library().mapped_path()}};
}

inline nlohmann::json plugin_json(const std::shared_ptr<PluginInstance>& p) { return plugin_json(p.get()); }

}  // namespace tokenhost
