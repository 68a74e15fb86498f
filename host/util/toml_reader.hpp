// Strict reading of TOML documents: every error names file:line:column and what was expected, and an
// unknown key is an error that names the closest known key. Shared by plugin.toml and deployment
// manifests.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <toml++/toml.h>

namespace tokenhost {

class ManifestError : public std::runtime_error {
 public:
  ManifestError(std::string file, uint32_t line, uint32_t column, const std::string& message);
  const std::string& file() const { return file_; }
  uint32_t line() const { return line_; }
  uint32_t column() const { return column_; }
  // The message without the location prefix.
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  uint32_t line_, column_;
  std::string message_;
};

// One TOML document being read; `file` is used in every error.
class TomlReader {
 public:
  // Parses text (named file in errors). Throws ManifestError on a syntax error.
  TomlReader(std::string file, std::string_view text);
  // Reads and parses a file. Throws ManifestError when it cannot be read or parsed.
  // The largest TOML file read (deployment and plugin manifests): 1 MiB.
  static constexpr uintmax_t kMaxFileBytes = uintmax_t(1) << 20;
  // The text of a regular file of at most kMaxFileBytes; ManifestError otherwise (cannot open, not a
  // regular file, too large) at 1:1. from_file reads it as TOML.
  static std::string read_text(const std::string& path);
  static TomlReader from_file(const std::string& path);

  const std::string& file() const { return file_; }
  const toml::table& root() const { return root_; }

  [[noreturn]] void fail(const toml::node& at, const std::string& message) const;

  // Each key of table must be in known; else an error at the key naming the closest known key.
  // context names the table in messages, e.g. "[plugin]".
  void check_keys(const toml::table& table, const std::vector<std::string>& known,
                  const std::string& context) const;

  // Typed getters. "require" fails when the key is absent; every getter fails on a wrong type.
  const toml::table& require_table(const toml::table& t, const std::string& key, const std::string& context) const;
  const toml::table* optional_table(const toml::table& t, const std::string& key, const std::string& context) const;
  std::string require_string(const toml::table& t, const std::string& key, const std::string& context) const;
  std::optional<std::string> optional_string(const toml::table& t, const std::string& key, const std::string& context) const;
  std::optional<int64_t> optional_int(const toml::table& t, const std::string& key, const std::string& context,
                                      int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  std::optional<bool> optional_bool(const toml::table& t, const std::string& key, const std::string& context) const;
  std::vector<std::string> optional_string_array(const toml::table& t, const std::string& key,
                                                 const std::string& context) const;

 private:
  TomlReader(std::string file, toml::table root) : file_(std::move(file)), root_(std::move(root)) {}
  const toml::node& node_or_table(const toml::table& t, const std::string& key) const;

  std::string file_;
  toml::table root_;
};

// "string", "integer", "table", ... for messages.
std::string toml_type_name(const toml::node& node);

}  // namespace tokenhost
