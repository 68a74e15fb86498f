// Conformance of every attention plugin of the built-in catalog: its forward() must agree with
// attention.reference's on the same random ragged batches over the same paged KV cache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_batch.hpp"
#include "harness.hpp"

namespace attention_conformance_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::vector<PluginManifest> attention_plugins() {
  std::vector<PluginManifest> out;
  for (const PluginManifest& m : builtin_catalog().all()) {
    if (m.kind == TH_KIND_ATTENTION) out.push_back(m);
  }
  return out;
}

bool lists_cpu(const PluginManifest& m) {
  return std::find(m.devices.begin(), m.devices.end(), "cpu") != m.devices.end();
}

}  // namespace

TEST_CASE("every attention plugin agrees with attention.reference on random ragged batches",
          "[conformance][attention]") {
  auto rng = fresh_rng("attention conformance");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  const std::vector<PluginManifest> plugins = attention_plugins();
  REQUIRE(!plugins.empty());
  REQUIRE(std::any_of(plugins.begin(), plugins.end(), [](const auto& m) { return m.id == "attention.reference"; }));

  for (const PluginManifest& m : plugins) {
    INFO("plugin " << m.id << " " << m.version << ", kv dtype " << quant::dtype_name(kv_dtype));
    int compared = 0, refused = 0;
    double worst = 0;
    std::string refusals;
    for (const HeadConfig& hc : head_configs()) {
      for (uint32_t head_dim : head_sizes()) {
        const uint32_t block_size = uniform_u32(rng, 0, 1) == 0 ? 4 : 16;
        const ModelSpec spec = with_kv_dtype(model_spec(hc.n_heads, hc.n_kv_heads, head_dim, 2), kv_dtype);
        std::shared_ptr<PluginInstance> plugin;
        try {
          plugin = make_plugin(m.id, spec);
        } catch (const PluginError& e) {  // refuses this shape: reported, counted
          ++refused;
          refusals += std::string("\n  ") + hc.name + " head_dim " + std::to_string(head_dim) + ": " + e.what();
          continue;
        }
        auto reference = make_plugin("attention.reference", spec);
        const FilledKv kv = fill_kv("kvcache.paged", spec, block_size, random_shapes(rng, block_size, 4), rng);
        REQUIRE(kv.tables_out_of_order);
        const AttentionBatch batch = make_batch(kv, hc.n_heads, uniform_u32(rng, 0, 1), rng);
        std::vector<float> want = batch.new_output(), got = batch.new_output();
        th_attention_batch v_want = batch.view(want), v_got = batch.view(got);
        th_error e1, e2;
        REQUIRE(reference->vtable<th_attention_vtable>().forward(reference->handle(), &v_want, &e1) == TH_OK);
        INFO(hc.name << " n_heads " << hc.n_heads << " n_kv_heads " << hc.n_kv_heads << " head_dim " << head_dim
                     << " block_size " << block_size << " n_tokens " << batch.n_tokens);
        const th_status s = plugin->vtable<th_attention_vtable>().forward(plugin->handle(), &v_got, &e2);
        INFO("forward: " << e2.text());
        REQUIRE(s == TH_OK);
        const double err = max_relative_error(batch, got, packed(batch, want));
        CAPTURE(err);
        REQUIRE(err < 1e-5);
        // And both against the float64 attention, so that the oracle itself is pinned down.
        REQUIRE(max_relative_error(batch, want, reference_attention(batch, kv)) < 1e-5);
        worst = std::max(worst, err);
        ++compared;
      }
    }
    std::printf("attention conformance: %s %s compared with attention.reference on %d configurations "
                "(MHA/GQA/MQA x head_dim 8/16/64/128, %s KV cache), max relative error %.3g, %d refused%s\n",
                m.id.c_str(), m.version.c_str(), compared, quant::dtype_name(kv_dtype), worst, refused, refusals.c_str());
    if (compared == 0 && !lists_cpu(m)) {
      // A device-only plugin cannot read this host-memory KV cache: say so loudly, do not pass silently.
      WARN(m.id << " runs on no CPU and was not compared:" << refusals);
      continue;
    }
    INFO("refusals:" << refusals);
    REQUIRE(compared > 0);
  }
}

}  // namespace attention_conformance_tests
