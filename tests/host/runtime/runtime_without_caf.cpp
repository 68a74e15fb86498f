// Links tokenhost_runtime alone (no CAF, no HTTP library): the forward pass, the plugin loader and the
// generator run without the actor system. Generates greedily on a synthetic model twice, through the
// in-tree attention and kvcache plugins, and checks the two runs agree token for token.
#include <cstdio>
#include <vector>

#include "plugin/catalog.hpp"
#include "runtime/generator.hpp"
#include "runtime/synthetic_model.hpp"

using namespace tokenhost;

int main() {
  ModelSpec m;
  m.name = "tiny";
  m.info.n_layers = 2;
  m.info.n_heads = 4;
  m.info.n_kv_heads = 2;
  m.info.head_dim = 16;
  m.info.dim = 64;
  m.info.ffn_dim = 256;
  m.info.vocab_size = 256;
  m.info.context_len = 128;
  m.info.weight_dtype = m.info.act_dtype = TH_DTYPE_F32;
  m.info.kv_dtype = TH_DTYPE_F16;
  PluginCatalog catalog({TOKENHOST_PLUGIN_BUILD_DIR});
  catalog.scan();
  std::vector<std::vector<int32_t>> runs;
  for (const char* attention : {"attention.reference", "attention.cpu_flash"}) {
    Generator g(make_synthetic_weights(m, 7), instantiate(catalog, attention, "t", m),
                instantiate(catalog, "kvcache.paged", "t", m), 4);
    std::vector<int32_t> out;
    g.generate({'h', 'e', 'l', 'l', 'o'}, 12, -1, Generator::greedy, [&](int32_t t) {
      out.push_back(t);
      return true;
    });
    runs.push_back(out);
  }
  if (runs[0].size() != 12 || runs[0] != runs[1]) {
    std::fprintf(stderr, "runtime without CAF: %zu and %zu tokens, the two attention plugins %s\n", runs[0].size(),
                 runs[1].size(), runs[0] == runs[1] ? "agree" : "disagree");
    return 1;
  }
  std::printf("runtime without CAF: 12 tokens, the same through attention.reference and attention.cpu_flash\n");
  return 0;
}
