// Whether a path lies in one of a set of folders, compared after resolving links and "..": the plugin
// folders' rule (POST /admin/plugins, admin export's plugin_paths).
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace tokenhost {

// Whether `path` is one of `folders` or lies inside one (links and ".." resolved where they exist).
inline bool inside_any_folder(const std::filesystem::path& path, const std::vector<std::string>& folders) {
  std::error_code ec;
  const auto resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  for (const auto& dir : folders) {
    const auto rel = resolved.lexically_relative(std::filesystem::weakly_canonical(dir, ec));
    if (!rel.empty() && *rel.begin() != ".." && rel.is_relative()) return true;
  }
  return false;
}

}  // namespace tokenhost
