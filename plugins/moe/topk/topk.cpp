// moe.topk: softmax top-k gating (optionally group-limited, DeepSeek's node-limited routing, and with a
// capacity per expert past which tokens are dropped), SwiGLU experts of any weight type the host's
// kernels take through its grouped products (th_host_api.grouped_matmul), and greedy (LPT) expert
// placement.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_moe.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

constexpr const char* kMe = "moe.topk";

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "moe.topk: check() needs a query");
    return sdk::moe::check_gating(kMe, *query, err);
  });
}

struct TopK {
  explicit TopK(const th_create_args& args) : gating(args), experts(kMe, args.host_ctx) {}
  const sdk::moe::Gating gating;
  sdk::moe::Experts experts;
};

th_status gate(th_instance* instance, const th_moe_gate_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    if (args == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "moe.topk: gate() got a NULL argument");
    sdk::moe::gate(kMe, sdk::self<TopK>(instance).gating, *args);
  });
}

th_status experts(th_instance* instance, const th_moe_experts_args* args, th_error* err) {
  return sdk::guard(err, [&] { sdk::self<TopK>(instance).experts.compute(args, err); });
}

// Longest-processing-time greedy: heaviest expert first onto the least loaded device.
th_status rebalance(th_instance*, const th_moe_load* load, th_moe_placement* out, th_error* err) {
  return sdk::guard(err, [&] {
    if (load == nullptr || out == nullptr || load->tokens_per_expert == nullptr || load->placement == nullptr ||
        out->placement == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "moe.topk: rebalance() got a NULL argument");
    }
    if (load->n_devices == 0) throw Error(TH_ERR_INVALID_ARGUMENT, "moe.topk: rebalance() needs n_devices > 0");
    const uint64_t* tokens = load->tokens_per_expert;
    std::vector<uint32_t> order(load->n_experts);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return tokens[a] != tokens[b] ? tokens[a] > tokens[b] : a < b;
    });
    std::vector<uint64_t> device_load(load->n_devices, 0);
    std::vector<int32_t> placement(load->n_experts);
    for (uint32_t e : order) {
      const size_t d = size_t(std::min_element(device_load.begin(), device_load.end()) - device_load.begin());
      device_load[d] += tokens[e];
      placement[e] = int32_t(d);
    }
    // The output may alias the input placement: compare before writing.
    const bool changed = !std::equal(placement.begin(), placement.end(), load->placement);
    std::copy(placement.begin(), placement.end(), out->placement);
    out->changed = changed ? 1 : 0;
  });
}

const th_moe_vtable kVtable = {
    sizeof(th_moe_vtable), sdk::create_instance<TopK>, sdk::destroy_instance<TopK>, check, gate, experts, rebalance,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_MOE, TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
