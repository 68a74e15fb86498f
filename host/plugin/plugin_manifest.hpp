// plugin.toml: the declaration of one plugin (id, kind, version, ABI, library, devices, and its
// documented, typed config defaults), and the validation of an engine's settings against it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "util/toml_reader.hpp"

namespace tokenhost {

enum class ParamType { integer, floating, boolean, string };
std::string param_type_name(ParamType type);

struct ConfigParam {
  std::string key;
  ParamType type = ParamType::integer;
  std::optional<double> min, max;
  std::string doc;
};

struct PluginManifest {
  std::string file;  // path of plugin.toml
  std::string id;    // "<kind>.<name>"
  th_kind kind = 0;
  std::string version;
  uint16_t abi_major = 0, abi_minor = 0;
  std::string library;  // absolute path of the shared library
  std::vector<std::string> devices;
  std::string description;
  std::vector<ConfigParam> params;
  toml::table defaults;  // key -> default value, one per param

  const ConfigParam* param(const std::string& key) const;
};

// The declared config keys as JSON, one place for every listing (plugins inspect --json, the admin
// API's /admin/plugins): {key: {"type", "default", "min", "max" (absent when unbounded), "doc"}}.
nlohmann::json config_params_json(const PluginManifest& manifest);
// One key as text: "block_size (int, default 16, 1..1024): Token positions per KV block."
std::string config_param_text(const PluginManifest& manifest, const ConfigParam& param);

// Reads and validates plugin.toml. Throws ManifestError (file:line:column).
PluginManifest read_plugin_manifest(const std::string& path);

// Checks an engine's settings for this plugin (unknown keys, types, ranges; errors located in the
// document of `reader`) and returns the plugin's defaults overridden by them. settings may be NULL.
toml::table merge_plugin_config(const PluginManifest& manifest, const TomlReader& reader,
                                const toml::table* settings, const std::string& context);

}  // namespace tokenhost
