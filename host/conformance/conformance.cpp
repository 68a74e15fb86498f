#include "conformance/conformance.hpp"

#include <algorithm>

#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost::conformance {

void Report::rule(const std::string& name, const std::function<void()>& check) {
  Outcome o{name, Outcome::Verdict::passed, ""};
  try {
    check();
  } catch (const std::exception& e) {
    o.verdict = Outcome::Verdict::failed;
    o.detail = e.what();
  }
  outcomes_.push_back(std::move(o));
}

void Report::not_applicable(const std::string& name, const std::string& why) {
  outcomes_.push_back({name, Outcome::Verdict::not_applicable, why});
}

size_t Report::count(Outcome::Verdict v) const {
  return size_t(std::count_if(outcomes_.begin(), outcomes_.end(), [v](const Outcome& o) { return o.verdict == v; }));
}

ModelSpec model_shape(uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim, th_dtype kv_dtype, uint32_t n_experts,
                      uint32_t n_experts_used) {
  ModelSpec m;
  m.name = "conformance";
  m.info.n_layers = 2;
  m.info.n_heads = n_heads;
  m.info.n_kv_heads = n_kv_heads;
  m.info.head_dim = head_dim;
  m.info.dim = n_heads * head_dim;
  m.info.ffn_dim = 2 * m.info.dim;
  m.info.vocab_size = 256;
  m.info.context_len = 512;
  m.info.n_experts = n_experts;
  m.info.n_experts_used = n_experts_used;
  m.info.weight_dtype = m.info.act_dtype = TH_DTYPE_F32;
  m.info.kv_dtype = kv_dtype;
  return m;
}

std::shared_ptr<PluginInstance> instance_for(PluginCatalog& catalog, const PluginManifest& plugin,
                                             const ModelSpec& model, std::string& why,
                                             std::shared_ptr<DraftSessionHost> drafts, std::shared_ptr<const PluginVocab> vocab) {
  InstanceSpec spec;
  spec.drafts = std::move(drafts);
  spec.vocab = std::move(vocab);
  spec.engine = "conformance";
  spec.slot = kind_name(plugin.kind);
  spec.model = model;
  spec.device = devices().front();
  spec.config = plugin.defaults;
  static metrics::Registry registry;  // plugins may register metrics, as they do in a server
  spec.metrics = &registry;
  auto lib = catalog.load(plugin);
  if (auto reasons = check_plugin(*lib, spec); !reasons.empty()) {
    why = join(reasons, "; ");
    return nullptr;
  }
  return PluginInstance::create(lib, spec);
}

Report run(const std::string& manifest_path, const Options& options) {
  PluginCatalog catalog({});
  const PluginManifest plugin = catalog.add(manifest_path);  // loads and checks the library
  Rng rng(options.seed);
  Report report;
  switch (plugin.kind) {
    case TH_KIND_ATTENTION: attention_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_KVCACHE: kvcache_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_SCHEDULER: scheduler_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_ROUTER: router_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_MOE: moe_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_SPEC_DECODE: spec_decode_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_KV_CONNECTOR: kv_connector_rules(catalog, plugin, rng, options, report); break;
    case TH_KIND_CONSTRAINT: constraint_rules(catalog, plugin, rng, options, report); break;
    default: report.not_applicable(kind_name(plugin.kind), "no rules for this kind");
  }
  return report;
}

}  // namespace tokenhost::conformance
