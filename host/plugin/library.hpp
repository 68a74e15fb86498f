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
  // a new copy, so a library rewritten since an earlier load is loaded anew. With a vetting program
  // set (below), the copy is first opened and validated by that program in a process of its own, and
  // only a library it accepts is opened here: a refused library runs none of its code (constructors,
  // entry point) inside this process. Throws PluginError.
  static std::shared_ptr<PluginLibrary> open(const PluginManifest& manifest);

  // The program open() runs as `PROGRAM vet-plugin MANIFEST LIBRARY` before it loads a library ("" =
  // none: load in this process at once). `tokenhost serve` sets its own executable.
  static void set_vetting_program(const std::string& program);
  // What `tokenhost vet-plugin` does in that process: reads the plugin.toml at manifest_file, opens
  // library (the private copy) in place of its library, validates it as open() does and closes it.
  // Throws PluginError with the reason a server would give.
  static void vet_here(const std::string& manifest_file, const std::string& library);
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
  // Opens path (the private copy, or the vetted file) into lib and validates its descriptor against
  // lib->manifest_.
  static void load(PluginLibrary& lib, const std::string& path);
  // Runs the vetting program on the private copy; throws PluginError with its reason when it refuses
  // (library_vetting.cpp).
  static void vet_in_child(const PluginManifest& manifest, const std::string& private_path);
  static std::string vetting_program();

  PluginManifest manifest_;
  std::string id_, version_;
  th_kind kind_ = 0;
  uint16_t abi_major_ = 0, abi_minor_ = 0;
  const void* vtable_ = nullptr;
  void* handle_ = nullptr;
  std::string private_path_;
};

}  // namespace tokenhost
