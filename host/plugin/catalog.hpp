// The plugins this host can load: every plugin.toml found under the search paths, and the libraries
// open now. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plugin/plugin_manifest.hpp"
#include "plugin/instance.hpp"
#include "plugin/library.hpp"

namespace tokenhost {

// $TOKENHOST_PLUGIN_PATH (colon-separated) first, then the build tree's and the install tree's plugins.
std::vector<std::string> default_plugin_paths();

class PluginCatalog {
 public:
  explicit PluginCatalog(std::vector<std::string> search_paths);

  // Finds every plugin.toml under the search paths (up to 4 levels down). A manifest that does not
  // parse is recorded in scan_errors(), not fatal; when two declare one id the first path wins.
  void scan();
  std::vector<std::string> scan_errors() const;
  const std::vector<std::string>& search_paths() const { return paths_; }

  // The manifest declaring id, or nullopt.
  std::optional<PluginManifest> find(const std::string& id) const;
  std::vector<PluginManifest> all() const;
  // Adds (or replaces) the manifest at path: how a new plugin version outside the search paths is
  // made known. Its library is loaded and checked first (as load() does): a library that cannot load
  // changes nothing; *loaded (when given) receives the library. Throws ManifestError or PluginError.
  PluginManifest add(const std::string& manifest_path, std::shared_ptr<PluginLibrary>* loaded = nullptr);

  // Opens the library of id. An unchanged file already open is shared; a file changed since (same
  // path, new contents) is opened anew from a fresh private copy. Throws PluginError.
  std::shared_ptr<PluginLibrary> load(const std::string& id);
  std::shared_ptr<PluginLibrary> load(const PluginManifest& manifest);

 private:
  struct OpenLibrary {
    std::weak_ptr<PluginLibrary> library;
    std::string stamp;  // size and modification time of the file it was copied from
  };
  mutable std::mutex mutex_;
  std::vector<std::string> paths_;
  std::map<std::string, PluginManifest> manifests_;  // by id
  std::vector<std::string> errors_;
  std::map<std::string, OpenLibrary> open_;  // by manifest file
};

// An instance of plugin id outside a deployment (the generate command, benchmarks, tests): its
// plugin.toml defaults overridden by settings (checked against plugin.toml's keys, types and ranges
// as a manifest's are), on the CPU, for model; peers carries its th_host_api.peer_send messages (a
// kv_connector's; NULL: none); vocab is th_create_args.vocab (NULL: none). Throws PluginError.
std::shared_ptr<PluginInstance> instantiate(PluginCatalog& catalog, const std::string& id, const std::string& engine,
                                            const ModelSpec& model, const toml::table& settings = {},
                                            metrics::Registry* metrics = nullptr,
                                            std::shared_ptr<PeerPost> peers = nullptr,
                                            std::shared_ptr<const PluginVocab> vocab = nullptr);

}  // namespace tokenhost
