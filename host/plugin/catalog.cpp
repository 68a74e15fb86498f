#include "plugin/catalog.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <spdlog/spdlog.h>

#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace fs = std::filesystem;

std::vector<std::string> default_plugin_paths() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("TOKENHOST_PLUGIN_PATH")) {
    std::stringstream in(env);
    std::string p;
    while (std::getline(in, p, ':'))
      if (!p.empty()) paths.push_back(p);
  }
#ifdef TOKENHOST_PLUGIN_BUILD_DIR
  paths.push_back(TOKENHOST_PLUGIN_BUILD_DIR);
#endif
#ifdef TOKENHOST_PLUGIN_INSTALL_DIR
  paths.push_back(TOKENHOST_PLUGIN_INSTALL_DIR);
#endif
  return paths;
}

PluginCatalog::PluginCatalog(std::vector<std::string> search_paths) : paths_(std::move(search_paths)) {}

void PluginCatalog::scan() {
  std::map<std::string, PluginManifest> found;
  std::vector<std::string> errors;
  for (const auto& root : paths_) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) continue;
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it.depth() > 4) it.disable_recursion_pending();
      if (it->is_regular_file(ec) && it->path().filename() == "plugin.toml") files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      try {
        PluginManifest m = read_plugin_manifest(file.string());
        if (found.count(m.id) != 0) {
          spdlog::debug("plugin {} at {} is shadowed by {}", m.id, file.string(), found[m.id].file);
          continue;
        }
        found.emplace(m.id, std::move(m));
      } catch (const ManifestError& e) {
        errors.emplace_back(e.what());
      }
    }
  }
  std::lock_guard lock(mutex_);
  manifests_ = std::move(found);
  errors_ = std::move(errors);
}

std::vector<std::string> PluginCatalog::scan_errors() const {
  std::lock_guard lock(mutex_);
  return errors_;
}

std::optional<PluginManifest> PluginCatalog::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = manifests_.find(id);
  if (it == manifests_.end()) return std::nullopt;
  return it->second;
}

std::vector<PluginManifest> PluginCatalog::all() const {
  std::lock_guard lock(mutex_);
  std::vector<PluginManifest> out;
  for (const auto& [id, m] : manifests_) out.push_back(m);
  return out;
}

PluginManifest PluginCatalog::add(const std::string& manifest_path, std::shared_ptr<PluginLibrary>* loaded) {
  PluginManifest m = read_plugin_manifest(manifest_path);
  // Its library must load and agree with the manifest before the manifest replaces another.
  std::shared_ptr<PluginLibrary> library = load(m);
  if (loaded != nullptr) *loaded = std::move(library);
  std::lock_guard lock(mutex_);
  manifests_.insert_or_assign(m.id, m);
  return m;
}

std::shared_ptr<PluginLibrary> PluginCatalog::load(const std::string& id) {
  auto m = find(id);
  if (!m) {
    std::vector<std::string> ids;
    for (const auto& known : all()) ids.push_back(known.id);
    throw PluginError("no plugin with id '" + id + "' in the search paths (" + join(paths_, ":") + ")" +
                      suggestion(id, ids));
  }
  return load(*m);
}

std::shared_ptr<PluginLibrary> PluginCatalog::load(const PluginManifest& manifest) {
  std::error_code ec;
  auto size = fs::file_size(manifest.library, ec);
  auto mtime = fs::last_write_time(manifest.library, ec);
  std::string stamp = ec ? std::string() : std::to_string(size) + "@" + std::to_string(mtime.time_since_epoch().count());
  std::lock_guard lock(mutex_);
  auto it = open_.find(manifest.file);
  if (it != open_.end() && !stamp.empty() && it->second.stamp == stamp) {
    if (auto lib = it->second.library.lock()) return lib;
  }
  auto lib = PluginLibrary::open(manifest);
  open_[manifest.file] = OpenLibrary{lib, stamp};
  return lib;
}

std::shared_ptr<PluginInstance> instantiate(PluginCatalog& catalog, const std::string& id, const std::string& engine,
                                            const ModelSpec& model, const toml::table& settings,
                                            metrics::Registry* metrics, std::shared_ptr<PeerPost> peers,
                                            std::shared_ptr<const PluginVocab> vocab) {
  auto manifest = catalog.find(id);
  if (!manifest) throw PluginError("no plugin '" + id + "' in " + join(catalog.search_paths(), ":"));
  InstanceSpec spec;
  spec.engine = engine;
  spec.slot = kind_name(manifest->kind);
  spec.model = model;
  spec.vocab = std::move(vocab);
  spec.device = devices().front();
  // The settings are checked against plugin.toml (keys, types, ranges) and merged over its defaults,
  // exactly as a deployment's are: the plugin reads declared keys without checking them again.
  std::ostringstream text;
  text << settings;
  try {
    TomlReader reader("settings of " + id, text.str());
    spec.config = merge_plugin_config(*manifest, reader, &reader.root(), "the settings of " + id);
  } catch (const ManifestError& e) {
    throw PluginError("plugin " + id + ": " + e.message());
  }
  spec.metrics = metrics;
  spec.peers = std::move(peers);
  return PluginInstance::create(catalog.load(*manifest), spec);
}

}  // namespace tokenhost
