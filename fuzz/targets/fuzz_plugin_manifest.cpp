// A plugin.toml as a vendor or an admin request hands it over: parsed and validated (keys, types, kind,
// id, ABI, config declarations with their defaults and ranges), then listed as the admin API lists it.
// Anything may be refused with a ManifestError naming file:line:column; nothing may crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "plugin/plugin_manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path (it checks the file is regular and small first): a file in memory-backed
  // /dev/shm, one per fuzzing process.
  static const std::string path = "/dev/shm/tokenhost-fuzz-plugin-" + std::to_string(::getpid()) + ".toml";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    const tokenhost::PluginManifest m = tokenhost::read_plugin_manifest(path);
    (void)tokenhost::config_params_json(m);
    for (const auto& p : m.params) (void)tokenhost::config_param_text(m, p);
  } catch (const tokenhost::ManifestError&) {
  }
  return 0;
}
