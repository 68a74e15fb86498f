// tokenhost plugin SDK: expert placement plans from expert load (C++17), DeepSeek's EPLB in small, for
// moe plugins that balance an engine's experts over devices (compute partitions): the plan a
// rebalance computes from the tokens each expert was routed.
//
// It adds no ABI: it computes with plain vectors. A plan places slots_per_device expert slots on each
// of `devices` devices; an expert may hold several slots (replicas), which share its tokens evenly. A
// device's load is the sum over its slots of its expert's load over the expert's replicas; a plan's
// imbalance is the busiest device's load over the mean (1: balanced; the step's straggler is that
// device).
//   - sdk::moe::replicate(): how many slots each expert gets: one each, then each spare slot to the
//     expert with the most load per replica (ties: the lower id);
//   - sdk::moe::balanced_packing(): items of given weights into packs of equal item counts, heaviest
//     first onto the lightest pack with room (ties: the lower pack);
//   - sdk::moe::plan_global(): replicas over all experts, then packing over all devices;
//   - sdk::moe::plan_hierarchical(): expert groups (consecutive ids) packed onto nodes first (a group
//     never leaves its node: DeepSeek's node-limited routing keeps traffic inside a node), then
//     replicas and packing within each node;
//   - sdk::moe::Plan::imbalance(), sdk::moe::imbalance_of(): the figure, for a plan or any placement.
#ifndef TOKENHOST_PLUGIN_MOE_BALANCE_HPP
#define TOKENHOST_PLUGIN_MOE_BALANCE_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace tokenhost {
namespace sdk {
namespace moe {

struct Plan {
  uint32_t devices = 0, slots_per_device = 0;
  std::vector<int32_t> slot_expert;  // [devices * slots_per_device]: the expert each slot holds
  std::vector<uint32_t> replicas;    // [n_experts]: slots each expert holds (>= 1)
  std::vector<double> device_load;   // [devices]: the load each device takes under the plan

  double imbalance() const {
    if (device_load.empty()) return 1.0;
    const double total = std::accumulate(device_load.begin(), device_load.end(), 0.0);
    if (total <= 0) return 1.0;
    return *std::max_element(device_load.begin(), device_load.end()) * double(device_load.size()) / total;
  }
};

// Slots per expert for `slots` slots in all (at least one per expert). Throws std::invalid_argument when
// there are fewer slots than experts.
inline std::vector<uint32_t> replicate(const std::vector<double>& load, size_t slots) {
  if (slots < load.size())
    throw std::invalid_argument(std::to_string(slots) + " slots cannot hold " + std::to_string(load.size()) + " experts");
  std::vector<uint32_t> replicas(load.size(), 1);
  for (size_t spare = load.size(); spare < slots; ++spare) {
    size_t best = 0;
    for (size_t e = 1; e < load.size(); ++e)
      if (load[e] * replicas[best] > load[best] * replicas[e]) best = e;  // load / replicas, compared exactly
    ++replicas[best];
  }
  return replicas;
}

// The items of each pack (indices into weights), packs of weights.size() / packs items each. Throws
// std::invalid_argument when packs does not divide the items.
inline std::vector<std::vector<size_t>> balanced_packing(const std::vector<double>& weights, size_t packs) {
  if (packs == 0 || weights.size() % packs != 0)
    throw std::invalid_argument(std::to_string(weights.size()) + " items do not split into " + std::to_string(packs) + " equal packs");
  const size_t per_pack = weights.size() / packs;
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weights[a] > weights[b]; });
  std::vector<std::vector<size_t>> out(packs);
  std::vector<double> load(packs, 0.0);
  for (size_t item : order) {
    size_t best = packs;
    for (size_t p = 0; p < packs; ++p)
      if (out[p].size() < per_pack && (best == packs || load[p] < load[best])) best = p;
    out[best].push_back(item);
    load[best] += weights[item];
  }
  return out;
}

namespace detail {
// The physical slots of the experts `experts` (their replicas), packed onto `devices` devices of
// slots_per_device slots each, written into plan from device first_device on.
inline void place(const std::vector<double>& load, const std::vector<size_t>& experts, size_t first_device, size_t devices,
                  Plan& plan) {
  std::vector<double> local(experts.size());
  for (size_t i = 0; i < experts.size(); ++i) local[i] = load[experts[i]];
  const std::vector<uint32_t> replicas = replicate(local, devices * plan.slots_per_device);
  std::vector<size_t> slot_owner;  // local expert of each physical slot
  std::vector<double> slot_load;
  for (size_t i = 0; i < experts.size(); ++i) {
    plan.replicas[experts[i]] = replicas[i];
    for (uint32_t r = 0; r < replicas[i]; ++r) {
      slot_owner.push_back(i);
      slot_load.push_back(local[i] / replicas[i]);
    }
  }
  const auto packs = balanced_packing(slot_load, devices);
  for (size_t d = 0; d < devices; ++d) {
    const size_t device = first_device + d;
    for (size_t s = 0; s < packs[d].size(); ++s) {
      plan.slot_expert[device * plan.slots_per_device + s] = int32_t(experts[slot_owner[packs[d][s]]]);
      plan.device_load[device] += slot_load[packs[d][s]];
    }
  }
}

inline Plan empty_plan(size_t n_experts, uint32_t devices, uint32_t slots_per_device) {
  if (devices == 0 || slots_per_device == 0) throw std::invalid_argument("a plan needs devices and slots");
  Plan plan;
  plan.devices = devices;
  plan.slots_per_device = slots_per_device;
  plan.slot_expert.assign(size_t(devices) * slots_per_device, -1);
  plan.replicas.assign(n_experts, 0);
  plan.device_load.assign(devices, 0.0);
  return plan;
}
}  // namespace detail

// Every expert replicated over all devices' slots at once, then packed. Throws std::invalid_argument
// when the slots are fewer than the experts.
inline Plan plan_global(const std::vector<double>& load, uint32_t devices, uint32_t slots_per_device) {
  Plan plan = detail::empty_plan(load.size(), devices, slots_per_device);
  std::vector<size_t> all(load.size());
  std::iota(all.begin(), all.end(), size_t(0));
  detail::place(load, all, 0, devices, plan);
  return plan;
}

// n_groups groups of consecutive experts packed onto `nodes` nodes of devices / nodes devices each
// (groups per node equal), then each node's experts replicated and packed onto its devices. Throws
// std::invalid_argument when groups do not divide the experts, nodes do not divide the groups or the
// devices, or a node's slots are fewer than its experts.
inline Plan plan_hierarchical(const std::vector<double>& load, uint32_t n_groups, uint32_t nodes, uint32_t devices,
                              uint32_t slots_per_device) {
  if (n_groups == 0 || load.size() % n_groups != 0)
    throw std::invalid_argument(std::to_string(n_groups) + " groups do not divide " + std::to_string(load.size()) + " experts");
  if (nodes == 0 || n_groups % nodes != 0 || devices % nodes != 0)
    throw std::invalid_argument(std::to_string(nodes) + " nodes divide neither the groups nor the devices evenly");
  Plan plan = detail::empty_plan(load.size(), devices, slots_per_device);
  const size_t group_size = load.size() / n_groups;
  std::vector<double> group_load(n_groups, 0.0);
  for (size_t e = 0; e < load.size(); ++e) group_load[e / group_size] += load[e];
  const auto node_groups = balanced_packing(group_load, nodes);
  const size_t devices_per_node = devices / nodes;
  for (size_t n = 0; n < nodes; ++n) {
    std::vector<size_t> experts;
    for (size_t g : node_groups[n])
      for (size_t e = g * group_size; e < (g + 1) * group_size; ++e) experts.push_back(e);
    std::sort(experts.begin(), experts.end());
    detail::place(load, experts, n * devices_per_node, devices_per_node, plan);
  }
  return plan;
}

// The imbalance of any placement (slot_expert as in Plan, -1 for an empty slot): each expert's load
// shared evenly by its slots. Throws std::invalid_argument for an expert outside the load, or one with
// load and no slot.
inline double imbalance_of(const std::vector<double>& load, const std::vector<int32_t>& slot_expert, uint32_t devices) {
  if (devices == 0 || slot_expert.size() % devices != 0) throw std::invalid_argument("slots do not split over the devices");
  std::vector<uint32_t> replicas(load.size(), 0);
  for (int32_t e : slot_expert) {
    if (e < -1 || e >= int32_t(load.size())) throw std::invalid_argument("slot holds expert " + std::to_string(e));
    if (e >= 0) ++replicas[size_t(e)];
  }
  for (size_t e = 0; e < load.size(); ++e)
    if (load[e] > 0 && replicas[e] == 0) throw std::invalid_argument("expert " + std::to_string(e) + " has load and no slot");
  Plan p;
  p.device_load.assign(devices, 0.0);
  const size_t per = slot_expert.size() / devices;
  for (size_t s = 0; s < slot_expert.size(); ++s)
    if (slot_expert[s] >= 0) p.device_load[s / per] += load[size_t(slot_expert[s])] / replicas[size_t(slot_expert[s])];
  return p.imbalance();
}

}  // namespace moe
}  // namespace sdk
}  // namespace tokenhost

#endif  // TOKENHOST_PLUGIN_MOE_BALANCE_HPP
