#include "base/expert_placement.hpp"

#include <algorithm>
#include <stdexcept>

namespace tokenhost {

ExpertPlacement::ExpertPlacement(uint32_t n_layers, uint32_t n_experts, uint32_t devices, uint32_t slots_per_device)
    : n_experts_(n_experts), devices_(devices) {
  if (devices == 0 || n_experts == 0 || uint64_t(slots_per_device) * devices < n_experts)
    throw std::invalid_argument("an expert placement needs devices with a slot for each of " + std::to_string(n_experts) + " experts");
  Layer start;
  start.per_device = slots_per_device;
  start.slots.assign(size_t(devices) * slots_per_device, -1);
  for (uint32_t d = 0; d < devices; ++d) {
    const uint32_t first = uint32_t(uint64_t(d) * n_experts / devices), end = uint32_t(uint64_t(d + 1) * n_experts / devices);
    for (uint32_t e = first; e < end; ++e) start.slots[size_t(d) * slots_per_device + (e - first)] = int32_t(e);
  }
  index(start);
  layers_.assign(n_layers, start);
}

void ExpertPlacement::index(Layer& layer) const {
  layer.replicas.assign(n_experts_, {});
  for (size_t s = 0; s < layer.slots.size(); ++s)
    if (layer.slots[s] >= 0) layer.replicas[size_t(layer.slots[s])].push_back(int32_t(s / layer.per_device));
}

std::vector<int32_t> ExpertPlacement::first_devices(uint32_t layer) const {
  std::vector<int32_t> out(n_experts_);
  const Layer& l = layers_.at(layer);
  for (uint32_t e = 0; e < n_experts_; ++e) out[e] = l.replicas[e].front();
  return out;
}

std::string ExpertPlacement::set_slots(uint32_t layer, const std::vector<int32_t>& slot_expert) {
  if (layer >= layers_.size()) return "layer " + std::to_string(layer) + " of " + std::to_string(layers_.size());
  if (slot_expert.empty() || slot_expert.size() % devices_ != 0)
    return std::to_string(slot_expert.size()) + " slots do not split over " + std::to_string(devices_) + " devices";
  Layer next;
  next.per_device = uint32_t(slot_expert.size() / devices_);
  next.slots = slot_expert;
  for (size_t s = 0; s < slot_expert.size(); ++s)
    if (slot_expert[s] < -1 || slot_expert[s] >= int32_t(n_experts_))
      return "slot " + std::to_string(s) + " holds expert " + std::to_string(slot_expert[s]) + ", outside the layer's " +
             std::to_string(n_experts_) + " experts";
  index(next);
  for (uint32_t e = 0; e < n_experts_; ++e)
    if (next.replicas[e].empty()) return "expert " + std::to_string(e) + " has no slot";
  layers_[layer] = std::move(next);
  return "";
}

std::string ExpertPlacement::set_devices(uint32_t layer, const std::vector<int32_t>& device_of_expert) {
  if (device_of_expert.size() != n_experts_)
    return std::to_string(device_of_expert.size()) + " devices for " + std::to_string(n_experts_) + " experts";
  std::vector<std::vector<int32_t>> on(devices_);
  for (uint32_t e = 0; e < n_experts_; ++e) {
    const int32_t d = device_of_expert[e];
    if (d < 0 || uint32_t(d) >= devices_)
      return "expert " + std::to_string(e) + " placed on device " + std::to_string(d) + " of " + std::to_string(devices_);
    on[size_t(d)].push_back(int32_t(e));
  }
  size_t per_device = layers_.at(layer).per_device;
  for (const auto& experts : on) per_device = std::max(per_device, experts.size());
  std::vector<int32_t> slots(devices_ * per_device, -1);
  for (size_t d = 0; d < on.size(); ++d) std::copy(on[d].begin(), on[d].end(), slots.begin() + ptrdiff_t(d * per_device));
  return set_slots(layer, slots);
}

void ExpertPlacement::assign(uint32_t layer, const int32_t* ids, const float* weights, size_t n, std::vector<int32_t>& device_of_choice) const {
  const Layer& l = layers_.at(layer);
  std::vector<uint32_t> turn(n_experts_, 0);
  device_of_choice.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (weights[i] == 0.0f) {
      device_of_choice[i] = -1;
      continue;
    }
    const auto& replicas = l.replicas.at(size_t(ids[i]));
    device_of_choice[i] = replicas[turn[size_t(ids[i])]++ % replicas.size()];
  }
}

double ExpertPlacement::imbalance(uint32_t layer, const std::vector<uint64_t>& tokens) const {
  const Layer& l = layers_.at(layer);
  std::vector<double> load(devices_, 0.0);
  double sum = 0;
  for (uint32_t e = 0; e < n_experts_ && e < tokens.size(); ++e) {
    for (int32_t d : l.replicas[e]) load[size_t(d)] += double(tokens[e]) / double(l.replicas[e].size());
    sum += double(tokens[e]);
  }
  if (sum == 0) return 0;
  return *std::max_element(load.begin(), load.end()) * devices_ / sum;
}

}  // namespace tokenhost
