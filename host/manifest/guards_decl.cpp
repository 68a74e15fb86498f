#include "manifest/guards_decl.hpp"

#include <stdexcept>

#include "util/json_to_toml.hpp"

namespace tokenhost {

GuardsDecl read_guards(const TomlReader& r, const toml::table& root) {
  GuardsDecl g;
  // Each table as the admin API's JSON change of a default policy, enabled by its presence.
  auto read = [&](const char* key, auto& policy, auto changed) {
    const toml::table* t = r.optional_table(root, key, "the deployment manifest");
    if (t == nullptr) return;
    nlohmann::json change = toml_to_json(*t);
    if (!change.contains("enabled")) change["enabled"] = true;
    try {
      policy = changed(policy, change, "[" + std::string(key) + "]");
    } catch (const std::invalid_argument& e) {
      r.fail(*t, e.what());
    }
  };
  read("breakers", g.breakers, routing::changed_breaker_policy);
  read("overload", g.overload, routing::changed_overload_policy);
  return g;
}

}  // namespace tokenhost
