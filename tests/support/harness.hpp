// Test helpers: where the built plugins and fixtures are, model shapes, and one-call plugin instances
// made through the real loader.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "plugin/catalog.hpp"
#include "plugin/instance.hpp"
#include "plugin/kind.hpp"

namespace tokenhost::testing {

inline std::string plugin_dir() { return TOKENHOST_PLUGIN_BUILD_DIR; }
inline std::string fixture_dir() { return TOKENHOST_FIXTURE_DIR; }
inline std::string fixture(const std::string& mode) { return fixture_dir() + "/" + mode + "/plugin.toml"; }

// The in-tree plugins, scanned once.
inline PluginCatalog& builtin_catalog() {
  static PluginCatalog catalog({plugin_dir()});
  static const bool scanned = (catalog.scan(), true);
  (void)scanned;
  return catalog;
}

inline ModelSpec model_spec(uint32_t n_heads = 4, uint32_t n_kv_heads = 2, uint32_t head_dim = 16,
                            uint32_t n_layers = 2, uint32_t n_experts = 0, uint32_t n_experts_used = 0) {
  ModelSpec m;
  m.name = "test";
  m.info.n_layers = n_layers;
  m.info.n_heads = n_heads;
  m.info.n_kv_heads = n_kv_heads;
  m.info.head_dim = head_dim;
  m.info.dim = n_heads * head_dim;
  m.info.ffn_dim = 4 * m.info.dim;
  m.info.vocab_size = 256;
  m.info.context_len = 512;
  m.info.n_experts = n_experts;
  m.info.n_experts_used = n_experts_used;
  m.info.weight_dtype = m.info.act_dtype = m.info.kv_dtype = TH_DTYPE_F32;
  return m;
}

// An instance of plugin id (from the built-in catalog, or the manifest at manifest_path), with its
// defaults overridden by config.
inline std::shared_ptr<PluginInstance> make_plugin(const std::string& id, const ModelSpec& model,
                                                   const toml::table& config = {},
                                                   metrics::Registry* registry = nullptr,
                                                   std::shared_ptr<PeerPost> peers = nullptr, const std::string& engine = "test") {
  if (!builtin_catalog().find(id)) throw std::runtime_error("test: no built-in plugin " + id);
  return instantiate(builtin_catalog(), id, engine, model, config, registry, std::move(peers));
}

// A random engine from a fresh seed each run; the seed is printed so a failure can be replayed.
inline std::mt19937_64 fresh_rng(const char* test) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("TOKENHOST_TEST_SEED")) seed = std::stoull(s);
  std::printf("%s: seed %llu (TOKENHOST_TEST_SEED replays it)\n", test, (unsigned long long)seed);
  return std::mt19937_64(seed);
}

}  // namespace tokenhost::testing
