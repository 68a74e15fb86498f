#include "plugin/plugin_manifest.hpp"

#include <charconv>
#include <filesystem>
#include <cmath>
#include <regex>
#include <sstream>

#include "base/device_kinds.hpp"
#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace fs = std::filesystem;

namespace {

// The shortest text that reads back as v (0.1, not 0.10000000000000001).
std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_number(double v) {
  if (v == double(int64_t(v)) && std::abs(v) < 1e15) return std::to_string(int64_t(v));
  return shortest(v);
}

}  // namespace

nlohmann::json config_params_json(const PluginManifest& manifest) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& p : manifest.params) {
    nlohmann::json j = {{"type", param_type_name(p.type)}, {"doc", p.doc}};
    if (const toml::node* d = manifest.defaults.get(p.key)) {
      d->visit([&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (toml::is_integer<T> || toml::is_floating_point<T> || toml::is_boolean<T> || toml::is_string<T>)
          j["default"] = v.get();
      });
    }
    auto number = [&](double x) { return p.type == ParamType::integer ? nlohmann::json(int64_t(x)) : nlohmann::json(x); };
    if (p.min) j["min"] = number(*p.min);
    if (p.max) j["max"] = number(*p.max);
    out[p.key] = j;
  }
  return out;
}

std::string config_param_text(const PluginManifest& manifest, const ConfigParam& p) {
  std::ostringstream text;
  text << p.key << " (" << param_type_name(p.type);
  if (const toml::node* d = manifest.defaults.get(p.key)) {
    text << ", default ";
    d->visit([&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (toml::is_floating_point<T>) {  // a float stays one: 1.0, 0.1
        const std::string s = shortest(v.get());
        text << s << (s.find_first_of(".eEn") == std::string::npos ? ".0" : "");
      } else {
        text << v;
      }
    });
  }
  if (p.min || p.max) text << ", " << (p.min ? format_number(*p.min) : "") << ".." << (p.max ? format_number(*p.max) : "");
  text << "): " << p.doc;
  return text.str();
}

std::string param_type_name(ParamType type) {
  switch (type) {
    case ParamType::integer: return "int";
    case ParamType::floating: return "float";
    case ParamType::boolean: return "bool";
    case ParamType::string: return "string";
  }
  return "?";
}

const ConfigParam* PluginManifest::param(const std::string& key) const {
  for (const auto& p : params)
    if (p.key == key) return &p;
  return nullptr;
}

namespace {

bool value_has_type(const toml::node& value, ParamType type) {
  switch (type) {
    case ParamType::integer: return value.is_integer();
    case ParamType::floating: return value.is_integer() || value.is_floating_point();
    case ParamType::boolean: return value.is_boolean();
    case ParamType::string: return value.is_string();
  }
  return false;
}

// Checks value against param's type and range; errors are located at value in reader's document.
void check_value(const TomlReader& reader, const ConfigParam& param, const toml::node& value,
                 const std::string& context) {
  if (!value_has_type(value, param.type)) {
    reader.fail(value, "'" + param.key + "' in " + context + " must be " + param_type_name(param.type) +
                           ", found " + toml_type_name(value));
  }
  if (param.type == ParamType::integer || param.type == ParamType::floating) {
    double v = value.is_integer() ? double(value.as_integer()->get()) : value.as_floating_point()->get();
    if ((param.min && v < *param.min) || (param.max && v > *param.max)) {
      std::string range = "[" + (param.min ? format_number(*param.min) : "-inf") + ", " +
                          (param.max ? format_number(*param.max) : "inf") + "]";
      reader.fail(value, "'" + param.key + "' in " + context + " is out of range " + range);
    }
  }
}

std::optional<double> number(const TomlReader& reader, const toml::table& t, const std::string& key,
                             const std::string& context) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (n->is_integer()) return double(n->as_integer()->get());
  if (n->is_floating_point()) return n->as_floating_point()->get();
  reader.fail(*n, "'" + key + "' in " + context + " must be a number, found " + toml_type_name(*n));
}

}  // namespace

PluginManifest read_plugin_manifest(const std::string& path) {
  TomlReader reader = TomlReader::from_file(path);
  const toml::table& root = reader.root();
  reader.check_keys(root, {"plugin", "config"}, "plugin.toml");
  const toml::table& p = reader.require_table(root, "plugin", "plugin.toml");
  reader.check_keys(p, {"id", "kind", "version", "abi", "library", "devices", "description"}, "[plugin]");

  PluginManifest m;
  m.file = path;
  m.id = reader.require_string(p, "id", "[plugin]");
  std::string kind = reader.require_string(p, "kind", "[plugin]");
  auto k = kind_from_name(kind);
  if (!k) reader.fail(*p.get("kind"), "unknown plugin kind '" + kind + "'" + suggestion(kind, kind_names()));
  m.kind = *k;
  if (m.id.rfind(kind + ".", 0) != 0 || m.id.size() == kind.size() + 1) {
    reader.fail(*p.get("id"), "plugin id '" + m.id + "' must be '" + kind + ".<name>' for kind '" + kind + "'");
  }
  static const std::regex id_chars("[a-z0-9_]+\\.[a-z0-9_]+");
  if (!std::regex_match(m.id, id_chars)) {
    reader.fail(*p.get("id"), "plugin id '" + m.id + "' may hold only lower-case letters, digits and '_'");
  }
  m.version = reader.require_string(p, "version", "[plugin]");
  std::string abi = reader.require_string(p, "abi", "[plugin]");
  static const std::regex abi_form("([0-9]{1,4})\\.([0-9]{1,4})");
  std::smatch match;
  if (!std::regex_match(abi, match, abi_form)) {
    reader.fail(*p.get("abi"), "'abi' in [plugin] must be \"<major>.<minor>\", e.g. \"1.0\", found \"" + abi + "\"");
  }
  m.abi_major = uint16_t(std::stoi(match[1].str()));
  m.abi_minor = uint16_t(std::stoi(match[2].str()));
  std::string library = reader.require_string(p, "library", "[plugin]");
  m.library = (fs::absolute(path).parent_path() / library).lexically_normal().string();
  m.devices = reader.optional_string_array(p, "devices", "[plugin]");
  if (m.devices.empty()) m.devices = {device_kind_name(TH_DEVICE_CPU)};
  for (const auto& d : m.devices) {
    if (!device_kind_named(d))
      reader.fail(*p.get("devices"), "unknown device '" + d + "' in [plugin] devices" + suggestion(d, device_kind_names()));
  }
  m.description = reader.optional_string(p, "description", "[plugin]").value_or("");

  if (const toml::table* config = reader.optional_table(root, "config", "plugin.toml")) {
    for (const auto& [key, node] : *config) {
      std::string name(key.str());
      std::string context = "[config." + name + "]";
      if (!node.is_table()) reader.fail(node, context + " must be a table with type, default and doc");
      const toml::table& t = *node.as_table();
      reader.check_keys(t, {"type", "default", "min", "max", "doc"}, context);
      ConfigParam param;
      param.key = name;
      std::string type = reader.require_string(t, "type", context);
      if (type == "int") param.type = ParamType::integer;
      else if (type == "float") param.type = ParamType::floating;
      else if (type == "bool") param.type = ParamType::boolean;
      else if (type == "string") param.type = ParamType::string;
      else reader.fail(*t.get("type"), "unknown type '" + type + "' in " + context + suggestion(type, {"int", "float", "bool", "string"}));
      param.min = number(reader, t, "min", context);
      param.max = number(reader, t, "max", context);
      // An int's bounds are ints: a float bound (65E36) would not convert back to one.
      for (const char* bound : {"min", "max"}) {
        const toml::node* b = t.get(bound);
        if (param.type == ParamType::integer && b != nullptr && !b->is_integer())
          reader.fail(*b, "'" + std::string(bound) + "' of the int " + context + " must be an integer, found " + toml_type_name(*b));
      }
      param.doc = reader.require_string(t, "doc", context);
      const toml::node* def = t.get("default");
      if (def == nullptr) reader.fail(t, "missing key 'default' in " + context);
      check_value(reader, param, *def, context);
      m.defaults.insert(name, *def);
      m.params.push_back(std::move(param));
    }
  }
  return m;
}

toml::table merge_plugin_config(const PluginManifest& manifest, const TomlReader& reader,
                                const toml::table* settings, const std::string& context) {
  toml::table merged = manifest.defaults;
  if (settings == nullptr) return merged;
  std::vector<std::string> known;
  for (const auto& p : manifest.params) known.push_back(p.key);
  for (const auto& [key, value] : *settings) {
    std::string name(key.str());
    const ConfigParam* param = manifest.param(name);
    if (param == nullptr) {
      auto begin = key.source().begin.line ? key.source().begin : value.source().begin;
      throw ManifestError(reader.file(), begin.line ? begin.line : 1, begin.column ? begin.column : 1,
                          "unknown config key '" + name + "' for plugin " + manifest.id + " in " + context +
                              (known.empty() ? std::string(" (it takes no config)") : suggestion(name, known)));
    }
    check_value(reader, *param, value, context);
    merged.insert_or_assign(name, value);
  }
  return merged;
}

}  // namespace tokenhost
