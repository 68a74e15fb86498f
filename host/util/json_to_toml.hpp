// An admin request's JSON "config" as the TOML table plugin configuration is read from. The JSON comes
// from parse_client_json (api/client_json.hpp), so its depth is bounded: the conversion recurses.
#pragma once

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace tokenhost {

// Throws std::invalid_argument for values TOML cannot hold (null).
toml::table json_to_toml(const nlohmann::json& object);

}  // namespace tokenhost
