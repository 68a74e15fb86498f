// An admin request's JSON "config" as the TOML table plugin configuration is read from, and back. The JSON comes
// from parse_client_json (api/client_json.hpp), so its depth is bounded: the conversion recurses.
#pragma once

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace tokenhost {

// Throws std::invalid_argument for values TOML cannot hold (null).
toml::table json_to_toml(const nlohmann::json& object);

// A TOML table as JSON (dates and times as their TOML text): a manifest's table read by code that also
// takes the same settings from the admin API's JSON.
nlohmann::json toml_to_json(const toml::table& table);

}  // namespace tokenhost
