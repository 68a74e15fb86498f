#include "util/toml_reader.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/text.hpp"

namespace tokenhost {

ManifestError::ManifestError(std::string file, uint32_t line, uint32_t column, const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(message) {}

std::string toml_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

TomlReader::TomlReader(std::string file, std::string_view text) : file_(std::move(file)) {
  try {
    root_ = toml::parse(text, file_);
  } catch (const toml::parse_error& e) {
    throw ManifestError(file_, e.source().begin.line, e.source().begin.column,
                        "TOML syntax error: " + std::string(e.description()));
  }
}

std::string TomlReader::read_text(const std::string& path) {
  // Manifests come from operators and, through the admin API, from requests: a device (/dev/zero), a
  // FIFO or a huge file must be refused before it is read, not read until memory runs out.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) throw ManifestError(path, 1, 1, "cannot open the file");
  if (!std::filesystem::is_regular_file(status)) throw ManifestError(path, 1, 1, "is not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw ManifestError(path, 1, 1, "cannot open the file");
  if (size > kMaxFileBytes)
    throw ManifestError(path, 1, 1, "is " + std::to_string(size) + " bytes, more than a manifest may be (" +
                                        std::to_string(kMaxFileBytes) + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ManifestError(path, 1, 1, "cannot open the file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TomlReader TomlReader::from_file(const std::string& path) { return TomlReader(path, read_text(path)); }

void TomlReader::fail(const toml::node& at, const std::string& message) const {
  auto begin = at.source().begin;
  throw ManifestError(file_, begin.line ? begin.line : 1, begin.column ? begin.column : 1, message);
}

void TomlReader::check_keys(const toml::table& table, const std::vector<std::string>& known,
                            const std::string& context) const {
  for (const auto& [key, node] : table) {
    std::string name(key.str());
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    auto begin = key.source().begin.line ? key.source().begin : node.source().begin;
    throw ManifestError(file_, begin.line ? begin.line : 1, begin.column ? begin.column : 1,
                        "unknown key '" + name + "' in " + context + suggestion(name, known));
  }
}

const toml::node& TomlReader::node_or_table(const toml::table& t, const std::string& key) const {
  if (const toml::node* n = t.get(key)) return *n;
  return t;
}

const toml::table& TomlReader::require_table(const toml::table& t, const std::string& key,
                                             const std::string& context) const {
  const toml::table* table = optional_table(t, key, context);
  if (table == nullptr) fail(t, "missing table '" + key + "' in " + context);
  return *table;
}

const toml::table* TomlReader::optional_table(const toml::table& t, const std::string& key,
                                              const std::string& context) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return nullptr;
  if (!n->is_table()) fail(*n, "'" + key + "' in " + context + " must be a table, found " + toml_type_name(*n));
  return n->as_table();
}

std::string TomlReader::require_string(const toml::table& t, const std::string& key,
                                       const std::string& context) const {
  auto v = optional_string(t, key, context);
  if (!v) fail(t, "missing key '" + key + "' in " + context + " (expected a string)");
  return *v;
}

std::optional<std::string> TomlReader::optional_string(const toml::table& t, const std::string& key,
                                                       const std::string& context) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_string()) fail(*n, "'" + key + "' in " + context + " must be a string, found " + toml_type_name(*n));
  return std::string(n->as_string()->get());
}

std::optional<int64_t> TomlReader::optional_int(const toml::table& t, const std::string& key,
                                                const std::string& context, int64_t min, int64_t max) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_integer()) fail(*n, "'" + key + "' in " + context + " must be an integer, found " + toml_type_name(*n));
  int64_t v = n->as_integer()->get();
  if (v < min || v > max) {
    fail(*n, "'" + key + "' in " + context + " = " + std::to_string(v) + " is out of range [" +
                 std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

std::optional<bool> TomlReader::optional_bool(const toml::table& t, const std::string& key,
                                              const std::string& context) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return std::nullopt;
  if (!n->is_boolean()) fail(*n, "'" + key + "' in " + context + " must be a boolean, found " + toml_type_name(*n));
  return n->as_boolean()->get();
}

std::vector<std::string> TomlReader::optional_string_array(const toml::table& t, const std::string& key,
                                                           const std::string& context) const {
  std::vector<std::string> out;
  const toml::node* n = t.get(key);
  if (n == nullptr) return out;
  if (!n->is_array()) fail(*n, "'" + key + "' in " + context + " must be an array of strings, found " + toml_type_name(*n));
  for (const toml::node& item : *n->as_array()) {
    if (!item.is_string()) fail(item, "'" + key + "' in " + context + " must hold strings, found " + toml_type_name(item));
    out.emplace_back(item.as_string()->get());
  }
  return out;
}

}  // namespace tokenhost
