// moe.eplb: moe.topk's gating and experts (sdk/plugin_moe.hpp) with DeepSeek's expert-parallel load
// balancer as its rebalance(): from the tokens each expert was routed since the last call, replicas of
// the hot experts fill the spare slots and the slots are packed over the engine's expert partitions
// (sdk/plugin_moe_balance.hpp), globally or node by node (hierarchical). A plan replaces the placement
// only when it lowers the layer's imbalance figure by min_improvement at least (no churn on even load).
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_moe.hpp>
#include <tokenhost/plugin_moe_balance.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

constexpr const char* kMe = "moe.eplb";

[[noreturn]] void invalid(const std::string& why) { throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kMe) + ": " + why); }

struct Balance {
  bool hierarchical = false;
  uint32_t nodes = 1;
  double min_improvement = 0;
};

Balance read_balance(const th_config* config) {
  const sdk::Config c(config);
  Balance b;
  const std::string mode = c.require_string("mode");
  if (mode != "global" && mode != "hierarchical") invalid("mode = \"" + mode + "\": expected \"global\" or \"hierarchical\"");
  b.hierarchical = mode == "hierarchical";
  b.nodes = uint32_t(c.require_int("nodes"));
  b.min_improvement = c.require_double("min_improvement");
  return b;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr) invalid("check() needs a query");
    const th_status status = sdk::moe::check_gating(kMe, *query, err);
    if (status != TH_OK) return status;
    const Balance b = read_balance(query->config);
    const uint32_t groups = uint32_t(sdk::Config(query->config).require_int("n_groups"));
    if (b.hierarchical && groups % b.nodes != 0) {
      sdk::set_error(err, std::string(kMe) + ": mode = \"hierarchical\" keeps each of the n_groups = " + std::to_string(groups) +
                              " expert groups on one node: nodes = " + std::to_string(b.nodes) + " must divide it");
      return TH_ERR_UNSUPPORTED;
    }
    return TH_OK;
  });
}

struct Eplb {
  explicit Eplb(const th_create_args& args) : gating(args), experts(kMe, args.host_ctx), balance(read_balance(args.config)) {}
  const sdk::moe::Gating gating;
  sdk::moe::Experts experts;
  const Balance balance;
};

th_status gate(th_instance* instance, const th_moe_gate_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    if (args == nullptr) invalid("gate() got a NULL argument");
    sdk::moe::gate(kMe, sdk::self<Eplb>(instance).gating, *args);
  });
}

th_status experts(th_instance* instance, const th_moe_experts_args* args, th_error* err) {
  return sdk::guard(err, [&] { sdk::self<Eplb>(instance).experts.compute(args, err); });
}

th_status rebalance(th_instance* instance, const th_moe_load* load, th_moe_placement* out, th_error* err) {
  return sdk::guard(err, [&] {
    const Eplb& self = sdk::self<Eplb>(instance);
    if (load == nullptr || out == nullptr || load->tokens_per_expert == nullptr || load->placement == nullptr || out->placement == nullptr)
      invalid("rebalance() got a NULL argument");
    if (load->n_devices == 0 || load->n_experts == 0) invalid("rebalance() needs devices and experts");
    // A host before 1.10 states no slots: one slot per expert, as many per device as the most loaded needs.
    const bool slots = TH_HAS_MEMBER(load, th_moe_load, slot_expert) && load->slot_expert != nullptr &&
                       TH_HAS_MEMBER(out, th_moe_placement, slot_expert) && out->slot_expert != nullptr;
    const uint32_t per_device = slots ? load->slots_per_device : (load->n_experts + load->n_devices - 1) / load->n_devices;
    std::vector<double> tokens(load->tokens_per_expert, load->tokens_per_expert + load->n_experts);
    std::vector<int32_t> current;
    if (slots) {
      current.assign(load->slot_expert, load->slot_expert + size_t(load->n_devices) * per_device);
    } else {  // each expert in one slot of its device
      current.assign(size_t(load->n_devices) * per_device, -1);
      std::vector<uint32_t> used(load->n_devices, 0);
      for (uint32_t e = 0; e < load->n_experts; ++e) {
        const int32_t d = load->placement[e];
        if (d < 0 || uint32_t(d) >= load->n_devices || used[size_t(d)] == per_device) {
          current.clear();  // not expressible in slots: any plan is an improvement
          break;
        }
        current[size_t(d) * per_device + used[size_t(d)]++] = int32_t(e);
      }
    }
    sdk::moe::Plan plan;
    try {
      plan = self.balance.hierarchical
                 ? sdk::moe::plan_hierarchical(tokens, self.gating.n_groups, self.balance.nodes, load->n_devices, per_device)
                 : sdk::moe::plan_global(tokens, load->n_devices, per_device);
    } catch (const std::invalid_argument& e) {
      invalid(std::string("no plan for ") + std::to_string(load->n_experts) + " experts over " + std::to_string(load->n_devices) +
              " devices of " + std::to_string(per_device) + " slots: " + e.what());
    }
    double now = 0;
    try {
      now = current.empty() ? 0 : sdk::moe::imbalance_of(tokens, current, load->n_devices);
    } catch (const std::invalid_argument&) {
      current.clear();  // the current placement leaves a loaded expert without a slot: replace it
    }
    const bool better = current.empty() || now - plan.imbalance() >= self.balance.min_improvement;
    const std::vector<int32_t>& chosen = better ? plan.slot_expert : current;
    out->changed = better && chosen != current ? 1 : 0;
    for (uint32_t e = 0; e < load->n_experts; ++e) out->placement[e] = load->placement[e];
    for (size_t s = chosen.size(); s-- > 0;)  // each expert's first slot gives its device
      if (chosen[s] >= 0) out->placement[size_t(chosen[s])] = int32_t(s / per_device);
    if (slots) std::copy(chosen.begin(), chosen.end(), out->slot_expert);
  });
}

const th_moe_vtable kVtable = {
    sizeof(th_moe_vtable), sdk::create_instance<Eplb>, sdk::destroy_instance<Eplb>, check, gate, experts, rebalance,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_MOE, TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
