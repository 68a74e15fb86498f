#include "cli/in_process.hpp"

#include <chrono>

#include <spdlog/spdlog.h>

#include "backends/backend.hpp"
#include "base/kv_dtypes.hpp"
#include "model/quant.hpp"
#include "plugin/catalog.hpp"
#include "util/text.hpp"

namespace tokenhost {

void apply_set_flag(InProcessSetup& setup, const std::string& flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size())
    throw std::invalid_argument("--set " + flag + ": expected SLOT=PLUGIN or SLOT.KEY=VALUE");
  const std::string name = flag.substr(0, eq), value = flag.substr(eq + 1);
  const size_t dot = name.find('.');
  const std::string slot = name.substr(0, dot);
  if (!setup.plugins.count(slot)) {
    std::vector<std::string> slots;
    for (const auto& [s, id] : setup.plugins) slots.push_back(s);
    throw std::invalid_argument("--set " + flag + ": no slot '" + slot + "' here" + suggestion(slot, slots));
  }
  if (dot == std::string::npos) {
    setup.plugins[slot] = value;
    return;
  }
  const std::string key = name.substr(dot + 1);
  if (key.empty() || key.find('.') != std::string::npos)
    throw std::invalid_argument("--set " + flag + ": expected SLOT.KEY=VALUE with one key");
  try {
    toml::table parsed = toml::parse("v = " + value);
    setup.configs[slot].insert_or_assign(key, *parsed.get("v"));
  } catch (const toml::parse_error&) {
    setup.configs[slot].insert_or_assign(key, value);  // a bare word
  }
}

InProcessModel load_in_process(const InProcessSetup& setup) {
  InProcessModel m;
  const auto started = std::chrono::steady_clock::now();
  m.model = load_gguf_model(setup.model_path, "model");
  const auto& info = m.model.weights->spec.info;
  spdlog::info("loaded {} ({}, {} layers, dim {}, {} heads / {} KV heads, vocab {}) in {:.2f} s, {:.1f} MiB of weights mapped",
               setup.model_path, m.model.weights->spec.architecture, info.n_layers, info.dim, info.n_heads, info.n_kv_heads,
               info.vocab_size, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
               double(m.model.weights->bytes) / (1 << 20));
  m.tokenizer = std::make_unique<Tokenizer>(m.model.tokenizer);
  return m;
}

void build_generator(InProcessModel& m, const InProcessSetup& setup) {
  const auto& info = m.model.weights->spec.info;
  PluginCatalog catalog(default_plugin_paths());
  catalog.scan();
  auto config = [&](const std::string& slot) {
    auto it = setup.configs.find(slot);
    return it == setup.configs.end() ? toml::table{} : it->second;
  };
  toml::table kv = config("kvcache");
  if (!kv.contains("block_size")) kv.insert("block_size", int64_t(setup.block_size));
  const int64_t block = kv["block_size"].value<int64_t>().value_or(setup.block_size);
  const uint32_t positions = setup.positions > 0 ? setup.positions : info.context_len;
  if (!kv.contains("n_blocks") && block > 0) kv.insert("n_blocks", int64_t((positions + block - 1) / block + 1));
  ModelSpec spec = m.model.weights->spec;  // as plugins see it: with the KV cache's element type
  const auto dtype = kv_dtype_named(setup.kv_dtype);
  if (!dtype) throw std::invalid_argument("unknown KV element type '" + setup.kv_dtype + "'" + suggestion(setup.kv_dtype, kv_dtype_names()));
  spec.info.kv_dtype = *dtype;
  std::shared_ptr<PluginInstance> moe;
  if (info.n_experts > 0) {
    const std::string& id = setup.plugins.at("moe");
    toml::table gating = config("moe");
    moe = instantiate(catalog, id, "generate", spec, gating);
    const bool stated = spec.to_abi().expert_weights_norm == TH_EXPERT_WEIGHTS_NORMALIZED;
    const std::string weights = gating["weights"].value<std::string>().value_or("model");
    spdlog::info("{} experts per layer, {} used per token: {} (weights = {}; the model's top-k weights are {}), {} experts", info.n_experts,
                 info.n_experts_used, id, weights, stated ? "renormalized" : "its softmax probabilities",
                 quant::dtype_name(m.model.weights->layers[0].experts[0].gate.type));
  }
  const Backend& cpu = *find_backend(TH_DEVICE_CPU);
  m.generator = std::make_unique<Generator>(
      cpu.place_weights(m.model.weights, 0, WeightPlacement{}),
      instantiate(catalog, setup.plugins.at("attention"), "generate", spec, config("attention")),
      instantiate(catalog, setup.plugins.at("kvcache"), "generate", spec, kv), setup.prefill_chunk, moe);
}

}  // namespace tokenhost
