#include "util/json_to_toml.hpp"

#include <sstream>
#include <stdexcept>
#include <string>

namespace tokenhost {
namespace {

using nlohmann::json;

void insert_json(toml::table& t, const std::string& key, const json& v);

toml::array json_array(const json& a) {
  toml::array out;
  for (const auto& v : a) {
    toml::table holder;
    insert_json(holder, "v", v);
    out.push_back(*holder.get("v"));
  }
  return out;
}

void insert_json(toml::table& t, const std::string& key, const json& v) {
  if (v.is_boolean()) t.insert(key, v.get<bool>());
  else if (v.is_number_integer()) t.insert(key, v.get<int64_t>());
  else if (v.is_number_float()) t.insert(key, v.get<double>());
  else if (v.is_string()) t.insert(key, v.get<std::string>());
  else if (v.is_object()) t.insert(key, json_to_toml(v));
  else if (v.is_array()) t.insert(key, json_array(v));
  else throw std::invalid_argument("config '" + key + "' is null; TOML has no null");
}

json toml_json(const toml::node& n) {
  if (auto* t = n.as_table()) return toml_to_json(*t);
  if (auto* a = n.as_array()) {
    json out = json::array();
    for (const auto& v : *a) out.push_back(toml_json(v));
    return out;
  }
  if (auto v = n.value<bool>(); v && n.is_boolean()) return *v;
  if (n.is_integer()) return n.value<int64_t>().value_or(0);
  if (n.is_floating_point()) return n.value<double>().value_or(0.0);
  if (n.is_string()) return n.value<std::string>().value_or("");
  std::ostringstream text;
  n.visit([&](const auto& v) { text << v; });
  return text.str();
}

}  // namespace

json toml_to_json(const toml::table& table) {
  json out = json::object();
  for (const auto& [k, v] : table) out[std::string(k.str())] = toml_json(v);
  return out;
}

toml::table json_to_toml(const json& object) {
  toml::table t;
  for (const auto& [k, v] : object.items()) insert_json(t, k, v);
  return t;
}

}  // namespace tokenhost
