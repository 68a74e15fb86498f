#include "plugin/library.hpp"

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <spdlog/spdlog.h>

#include "plugin/crash_attribution.hpp"
#include "plugin/host_api.hpp"
#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace fs = std::filesystem;
namespace {

std::atomic<size_t> g_open_count{0};
std::atomic<uint64_t> g_copy_counter{0};

// Private copies live in one directory per process, made with its first copy and removed with its
// last, so a process that ends leaves nothing in the temporary directory. The directory is made by
// mkdtemp (a new name, mode 0700, this user's): another user cannot have prepared it, nor read or swap
// the copies in it. A process that died with copies open (a crash, SIGKILL) leaves its directory; the
// next process to make one removes those.
constexpr const char* kPrivateDirPrefix = "tokenhost-plugins-";  // then the pid, '-' and mkdtemp's six characters
std::mutex g_copies_mutex;  // guards the directory's creation, the copies into it and its removal
size_t g_live_copies = 0;
fs::path g_private_dir;  // empty while there is none

// Copies `from` into the private directory (made if needed) as `name`; returns the copy's path.
std::string make_private_copy(const std::string& from, const std::string& name, std::error_code& ec) {
  std::lock_guard<std::mutex> lock(g_copies_mutex);
  if (g_live_copies == 0) {
    if (size_t n = PluginLibrary::remove_stale_private_dirs(); n > 0) {
      spdlog::info("removed {} private plugin director{} left by processes that ended", n, n == 1 ? "y" : "ies");
    }
  }
  if (g_private_dir.empty()) {
    const fs::path tmp = fs::temp_directory_path(ec);
    if (ec) return {};
    std::string dir = (tmp / (kPrivateDirPrefix + std::to_string(getpid()) + "-XXXXXX")).string();
    if (::mkdtemp(dir.data()) == nullptr) {
      ec = std::error_code(errno, std::generic_category());
      return {};
    }
    g_private_dir = dir;
  }
  const fs::path to = g_private_dir / name;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return {};
  ++g_live_copies;
  return to.string();
}

void remove_private_copy(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_copies_mutex);
  std::error_code ec;
  fs::remove(path, ec);
  if (g_live_copies > 0 && --g_live_copies == 0) {
    fs::remove(g_private_dir, ec);  // only if empty
    g_private_dir.clear();
  }
}

std::string abi_string(unsigned major, unsigned minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// dlerror() names the private copy; users know the library by its real path.
std::string real_path_error(std::string message, const std::string& private_path, const std::string& real) {
  for (size_t at = message.find(private_path); at != std::string::npos; at = message.find(private_path, at)) {
    message.replace(at, private_path.size(), real);
    at += real.size();
  }
  return message;
}

}  // namespace

std::shared_ptr<PluginLibrary> PluginLibrary::open(const PluginManifest& manifest) {
  const std::string where = "plugin " + manifest.id + " (" + manifest.file + ")";
  std::error_code ec;
  if (!fs::is_regular_file(manifest.library, ec)) {
    throw PluginError(where + ": library file '" + manifest.library + "' does not exist");
  }

  std::shared_ptr<PluginLibrary> lib(new PluginLibrary());
  lib->manifest_ = manifest;
  // Load from a private copy: the file may be replaced while we run, and dlopen caches by path.
  lib->private_path_ = make_private_copy(
      manifest.library, manifest.id + "." + std::to_string(getpid()) + "." + std::to_string(++g_copy_counter) + ".so", ec);
  if (ec) {
    lib->private_path_.clear();
    throw PluginError(where + ": cannot copy library '" + manifest.library + "': " + ec.message());
  }

  if (!vetting_program().empty()) vet_in_child(manifest, lib->private_path_);
  load(*lib, lib->private_path_);
  spdlog::info("loaded plugin {} {} (ABI {}) from {}", lib->id_, lib->version_, abi_string(lib->abi_major_, lib->abi_minor_),
               manifest.library);
  return lib;
}

void PluginLibrary::load(PluginLibrary& lib, const std::string& path) {
  const PluginManifest& manifest = lib.manifest_;
  const std::string where = "plugin " + manifest.id + " (" + manifest.file + ")";
  dlerror();
  lib.handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib.handle_ == nullptr) {
    const char* e = dlerror();
    throw PluginError(where + ": cannot load library '" + manifest.library + "': " +
                      real_path_error(e ? e : "unknown dlopen error", path, manifest.library));
  }
  ++g_open_count;

  auto entry = reinterpret_cast<th_plugin_entry_fn>(dlsym(lib.handle_, TH_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    throw PluginError(where + ": library '" + manifest.library + "' has no entry symbol '" +
                      TH_PLUGIN_ENTRY_SYMBOL + "' (build it with tokenhost_add_plugin and TOKENHOST_PLUGIN_ENTRY)");
  }
  install_crash_attribution();
  const th_plugin_descriptor* d = nullptr;
  {
    const std::string slot = kind_name(manifest.kind);
    const PluginCallSite site{manifest.id.c_str(), manifest.version.c_str(), slot.c_str(), "", TH_PLUGIN_ENTRY_SYMBOL};
    PluginCallScope scope(site);
    d = entry(host_api());
  }
  if (d == nullptr) {
    throw PluginError(where + ": entry point returned no descriptor (the plugin refused this host " +
                      abi_string(TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR) + "; see its log lines)");
  }
  if (d->struct_size < offsetof(th_plugin_descriptor, vtable) + sizeof(void*)) {
    throw PluginError(where + ": descriptor struct_size " + std::to_string(d->struct_size) +
                      " is smaller than the ABI 1.0 descriptor");
  }
  lib.abi_major_ = d->abi_major;
  lib.abi_minor_ = d->abi_minor;
  const std::string plugin_abi = abi_string(d->abi_major, d->abi_minor);
  const std::string host_abi = abi_string(TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR);
  if (d->abi_major != TH_ABI_VERSION_MAJOR) {
    throw PluginError(where + ": built for ABI " + plugin_abi + " but this host speaks ABI " + host_abi +
                      " (the major versions must be equal)");
  }
  if (d->abi_minor > TH_ABI_VERSION_MINOR) {
    throw PluginError(where + ": built for ABI " + plugin_abi + ", newer than this host's ABI " + host_abi +
                      " (a plugin's minor version must not exceed the host's)");
  }
  if (d->abi_major != manifest.abi_major || d->abi_minor != manifest.abi_minor) {
    throw PluginError(where + ": plugin.toml declares ABI " + abi_string(manifest.abi_major, manifest.abi_minor) +
                      " but the library was built for ABI " + plugin_abi);
  }
  if (d->id == nullptr || d->version == nullptr) {
    throw PluginError(where + ": descriptor has a NULL id or version");
  }
  lib.id_ = d->id;  // copied: the strings live in the library's image
  lib.version_ = d->version;
  lib.kind_ = d->kind;
  if (d->kind != manifest.kind) {
    throw PluginError(where + ": the library declares kind '" + kind_name(d->kind) + "' but plugin.toml says '" +
                      kind_name(manifest.kind) + "'");
  }
  if (lib.id_ != manifest.id) {
    throw PluginError(where + ": the library declares id '" + lib.id_ + "' but plugin.toml says '" + manifest.id + "'");
  }
  if (lib.version_ != manifest.version) {
    throw PluginError(where + ": the library declares version " + lib.version_ + " but plugin.toml says " +
                      manifest.version + " (rebuild the library or correct plugin.toml: operators see the manifest's)");
  }
  if (d->vtable == nullptr) throw PluginError(where + ": descriptor has no vtable");
  lib.vtable_ = d->vtable;
  // The vtable must cover the vtable of the minor it declares (GROWTH, th_common.h); members past its
  // struct_size are never called (PluginInstance::fn).
  const uint32_t vt_size = static_cast<const th_vtable_head*>(d->vtable)->struct_size;
  const size_t declared_size = vtable_size(d->kind, d->abi_minor);
  if (declared_size == 0)  // a kind a later minor added (kv_connector: 1.9) cannot be built against an earlier one
    throw PluginError(where + ": the kind " + kind_name(d->kind) + " does not exist in ABI " + plugin_abi +
                      ", which the library declares (rebuild it against the headers that define the kind)");
  if (vt_size < declared_size) {
    throw PluginError(where + ": " + kind_name(d->kind) + " vtable struct_size " + std::to_string(vt_size) +
                      " is smaller than the ABI " + plugin_abi + " " + kind_name(d->kind) + " vtable (" +
                      std::to_string(declared_size) + " bytes): the plugin declares a minor whose members it does not fill");
  }
  auto missing = missing_vtable_members(d->kind, d->vtable);
  if (!missing.empty()) {
    throw PluginError(where + ": required vtable member" + (missing.size() > 1 ? "s " : " ") + join(missing, ", ") +
                      (missing.size() > 1 ? " are" : " is") + " NULL");
  }
  // Prefix caching's members go together (th_kvcache.h, ABI 1.5): a plugin setting some of them would
  // be given lookups it cannot publish to, or the reverse.
  if (d->kind == TH_KIND_KVCACHE && vt_size >= TH_SIZE_THROUGH(th_kvcache_vtable, cache_flush)) {
    const auto& vt = *static_cast<const th_kvcache_vtable*>(d->vtable);
    const int set = (vt.seq_lookup != nullptr) + (vt.seq_publish != nullptr) + (vt.cache_flush != nullptr);
    if (set != 0 && set != 3)
      throw PluginError(where + ": kvcache vtable sets " + std::to_string(set) +
                        " of seq_lookup, seq_publish and cache_flush: prefix caching needs all three (or none)");
  }
}

PluginLibrary::~PluginLibrary() {
  if (handle_ != nullptr) {
    if (dlclose(handle_) != 0) spdlog::warn("dlclose of {} failed: {}", manifest_.library, dlerror());
    --g_open_count;
    if (!id_.empty()) spdlog::info("unloaded plugin {} {} ({})", id_, version_, manifest_.library);
  }
  if (!private_path_.empty()) remove_private_copy(private_path_);
}

size_t PluginLibrary::remove_stale_private_dirs() {
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  if (ec) return 0;
  const std::string prefix = kPrivateDirPrefix;
  size_t removed = 0;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string digits = name.substr(prefix.size());
    digits = digits.substr(0, digits.find('-'));  // PID-XXXXXX (and the older PID alone)
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid == getpid() || pid <= 0) continue;
    // ESRCH: no such process. EPERM means one exists (another user's): its directory is left alone.
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code status_ec, remove_ec;
    if (!fs::is_directory(fs::symlink_status(it->path(), status_ec))) continue;
    if (fs::remove_all(it->path(), remove_ec) != static_cast<std::uintmax_t>(-1) && !remove_ec) ++removed;
  }
  return removed;
}

bool PluginLibrary::is_mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) return true;
  }
  return false;
}

size_t PluginLibrary::open_count() { return g_open_count.load(); }

}  // namespace tokenhost
