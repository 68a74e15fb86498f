// One loaded plugin library: a private copy of the file, dlopen'd, its descriptor checked against the
// host's ABI and its plugin.toml. Shared by every instance made from it (std::shared_ptr): the library
// is closed, and its private copy deleted, when the last instance and the last reference are gone.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

#include "plugin/plugin_manifest.hpp"

namespace tokenhost {

// A plugin that cannot be loaded, checked or created. what() says which plugin, which file and why.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PluginLibrary {
 public:
  // Copies manifest.library to a private file, opens it and validates its descriptor. Each call opens
  // a new copy, so a library rewritten since an earlier load is loaded anew. Throws PluginError.
  static std::shared_ptr<PluginLibrary> open(const PluginManifest& manifest);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const PluginManifest& manifest() const { return manifest_; }
  const std::string& id() const { return id_; }
  const std::string& version() const { return version_; }
  th_kind kind() const { return kind_; }
  uint16_t abi_major() const { return abi_major_; }
  uint16_t abi_minor() const { return abi_minor_; }
  const void* vtable() const { return vtable_; }
  const th_vtable_head& head() const { return *static_cast<const th_vtable_head*>(vtable_); }
  // The private copy that is mapped (while this object lives).
  const std::string& mapped_path() const { return private_path_; }

  // True when a file of this path is mapped into the process (reads /proc/self/maps): lets tests and
  // operators see that a closed library really left memory.
  static bool is_mapped(const std::string& path);
  // Libraries currently open, process-wide.
  static size_t open_count();
  // Removes the private-copy directories (TMPDIR/tokenhost-plugins-PID) of processes that no longer
  // exist, and returns how many it removed. open() calls it when it makes this process's directory.
  static size_t remove_stale_private_dirs();

 private:
  PluginLibrary() = default;

  PluginManifest manifest_;
  std::string id_, version_;
  th_kind kind_ = 0;
  uint16_t abi_major_ = 0, abi_minor_ = 0;
  const void* vtable_ = nullptr;
  void* handle_ = nullptr;
  std::string private_path_;
};

}  // namespace tokenhost
