#include "actors/registry.hpp"

#include <nlohmann/json.hpp>

#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace {

struct RegistryState {
  std::shared_ptr<PluginCatalog> catalog;
  static inline const char* name = "tokenhost.registry";
};

nlohmann::json manifest_json(const PluginManifest& m) {
  const nlohmann::json config = config_params_json(m);
  return {{"id", m.id}, {"kind", kind_name(m.kind)}, {"version", m.version},
          {"abi", std::to_string(m.abi_major) + "." + std::to_string(m.abi_minor)},
          {"manifest", m.file}, {"library", m.library}, {"devices", m.devices},
          {"description", m.description}, {"config", config}};
}

registry_actor::behavior_type registry(registry_actor::stateful_pointer<RegistryState> self,
                                       std::shared_ptr<PluginCatalog> catalog) {
  self->state.catalog = std::move(catalog);
  return {
      [=](load_atom, const std::string& id) -> LoadReply {
        auto& c = *self->state.catalog;
        LoadReply r;
        auto known = c.find(id);
        if (!known) {
          std::vector<std::string> ids;
          for (const auto& m : c.all()) ids.push_back(m.id);
          r.error = "no plugin with id '" + id + "' in the catalog" + suggestion(id, ids);
          r.not_found = true;
          return r;
        }
        try {
          r.manifest = c.add(known->file, &r.library);  // a newer plugin.toml may have been installed
        } catch (const std::exception& e) {
          r.error = e.what();
        }
        return r;
      },
      [=](add_atom, const std::string& path) -> LoadReply {
        LoadReply r;
        try {
          r.manifest = self->state.catalog->add(path);
        } catch (const ManifestError& e) {
          r.error = e.what();
          r.not_found = e.message() == "cannot open the file";
        } catch (const PluginError& e) {
          r.error = e.what();
        }
        return r;
      },
      [=](list_atom) -> StatusJson {
        auto& c = *self->state.catalog;
        nlohmann::json list = nlohmann::json::array();
        for (const auto& m : c.all()) list.push_back(manifest_json(m));
        return {nlohmann::json{{"plugins", list}, {"search_paths", c.search_paths()}, {"errors", c.scan_errors()},
                               {"open_libraries", PluginLibrary::open_count()}}
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};  // plugin-given text may not be UTF-8
      },
  };
}

}  // namespace

registry_actor spawn_registry(caf::actor_system& sys, std::shared_ptr<PluginCatalog> catalog) {
  return sys.spawn(registry, std::move(catalog));
}

}  // namespace tokenhost
