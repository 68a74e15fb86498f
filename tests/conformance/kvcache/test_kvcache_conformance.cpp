// Conformance of every kvcache plugin of the built-in catalog: the same random reserve/fork/free
// sequence keeps exact accounting (against a plugin-independent model) and data written through the
// layout reads back identically through seq_blocks after forks and copy-on-write.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kv_cache.hpp"

namespace kvcache_conformance_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::vector<PluginManifest> kvcache_plugins() {
  std::vector<PluginManifest> out;
  for (const PluginManifest& m : builtin_catalog().all()) {
    if (m.kind == TH_KIND_KVCACHE) out.push_back(m);
  }
  return out;
}

}  // namespace

TEST_CASE("every kvcache plugin keeps exact accounting and its data over random reserve/fork/free",
          "[conformance][kvcache]") {
  auto seed_rng = fresh_rng("kvcache conformance");
  const std::vector<PluginManifest> plugins = kvcache_plugins();
  REQUIRE(!plugins.empty());
  const std::mt19937_64 start = seed_rng;  // every plugin gets the same operation sequence
  for (const PluginManifest& m : plugins) {
    for (uint32_t block_size : {1u, 4u, 16u}) {
      INFO("plugin " << m.id << " block_size " << block_size);
      std::mt19937_64 rng = start;
      KvCache cache(m.id, model_spec(4, 2, 4, /*n_layers=*/2), block_size, 40);
      run_random_kv_ops(cache, rng, 300, /*check_data=*/true);
    }
    std::printf("kvcache conformance: %s %s passed 3 x 300 random reserve/fork/free operations\n", m.id.c_str(),
                m.version.c_str());
  }
}

TEST_CASE("every kvcache plugin copies on write after a fork", "[conformance][kvcache]") {
  auto rng = fresh_rng("kvcache conformance COW");
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const th_dtype dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  for (const PluginManifest& m : kvcache_plugins()) {
    INFO("plugin " << m.id << ", kv dtype " << quant::dtype_name(dtype));
    const uint32_t bs = 4;
    const ModelSpec spec = with_kv_dtype(model_spec(4, 2, 8, 3), dtype);
    if (dtype != TH_DTYPE_F32) {  // f32 is required of every kvcache plugin; other types are optional
      try {
        make_plugin(m.id, spec, kv_config(bs, 40));
      } catch (const PluginError& e) {
        std::printf("kvcache conformance: %s keeps no %s cache: %s\n", m.id.c_str(), quant::dtype_name(dtype), e.what());
        continue;
      }
    }
    KvCache c(m.id, spec, bs, 40);
    const uint32_t len = 3 * bs + 1;
    REQUIRE(c.reserve(10, len, 0) == TH_OK);
    const std::vector<int32_t> parent = c.table(10);
    std::vector<std::vector<float>> old(len, std::vector<float>(c.floats_per_position()));
    for (uint32_t p = 0; p < len; ++p) {
      for (float& x : old[p]) x = uni(rng);
      c.write_position(parent, p, old[p]);
    }
    // Several children, each rewriting from its own random position.
    for (uint64_t child = 11; child < 15; ++child) {
      REQUIRE(c.fork(10, child) == TH_OK);
      const uint32_t first_write = uint32_t(rng() % len);
      REQUIRE(c.reserve(child, len + bs, first_write) == TH_OK);
      const std::vector<int32_t> t = c.table(child);
      for (uint32_t p = 0; p < len; ++p) REQUIRE(c.read_position(t, p) == old[p]);
      for (uint32_t j = 0; j < t.size() && j < parent.size(); ++j) {
        INFO("child " << child << " first_write " << first_write << " block " << j);
        REQUIRE((t[j] == parent[j]) == ((j + 1) * bs <= first_write));  // shared iff wholly before first_write
      }
      for (uint32_t p = first_write; p < len + bs; ++p) {
        std::vector<float> fresh(c.floats_per_position());
        for (float& x : fresh) x = uni(rng);
        c.write_position(t, p, fresh);
        REQUIRE(c.read_position(t, p) == fresh);
      }
      for (uint32_t p = 0; p < len; ++p) REQUIRE(c.read_position(parent, p) == old[p]);
      const th_kv_stats s = c.stats();
      REQUIRE(s.used_blocks + s.free_blocks == s.total_blocks);
    }
    for (uint64_t seq = 10; seq < 15; ++seq) c.free(seq);
    CHECK(c.stats().used_blocks == 0);
  }
}

}  // namespace kvcache_conformance_tests
