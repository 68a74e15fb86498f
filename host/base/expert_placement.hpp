// Where an engine's experts compute when it spreads them over several compute partitions (its
// expert_partitions, the README's "Expert parallelism"): per MoE layer, each partition ("device")
// holds slots_per_device expert slots; an expert may hold slots on several devices (replicas), which
// share its tokens. The engine starts with experts laid out in order (device d: experts [d*E/D,
// (d+1)*E/D), its spare slots empty); the moe plugin's rebalance() replaces a layer's placement between
// steps (plugin/moe_rebalance.hpp). One thread (the engine's worker) reads and changes it: no lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tokenhost {

class ExpertPlacement {
 public:
  // devices >= 1; slots_per_device >= ceil(n_experts / devices).
  ExpertPlacement(uint32_t n_layers, uint32_t n_experts, uint32_t devices, uint32_t slots_per_device);

  uint32_t n_layers() const { return uint32_t(layers_.size()); }
  uint32_t n_experts() const { return n_experts_; }
  uint32_t devices() const { return devices_; }
  // A layer's slots per device: the engine's, or more after a placement by device put more experts on one.
  uint32_t slots_per_device(uint32_t layer) const { return layers_.at(layer).per_device; }
  // [devices * slots_per_device(layer)]: the expert in each slot, -1 for an empty one.
  const std::vector<int32_t>& slots(uint32_t layer) const { return layers_.at(layer).slots; }
  // [n_experts]: the device of each expert's first slot.
  std::vector<int32_t> first_devices(uint32_t layer) const;

  // A layer's new slots (size devices * slots_per_device(layer) or a multiple of devices, each -1 or an
  // expert, every expert in one slot at least). "" when applied; else what is wrong, the placement kept.
  std::string set_slots(uint32_t layer, const std::vector<int32_t>& slot_expert);
  // A layer's new placement by device, one slot per expert ([n_experts] devices in [0, devices)).
  std::string set_devices(uint32_t layer, const std::vector<int32_t>& device_of_expert);

  // The device that computes each of n choices (a gate's ids and weights, token by token): -1 for a
  // choice of weight 0; an expert's replicas take its choices in turn, in the choices' order.
  void assign(uint32_t layer, const int32_t* ids, const float* weights, size_t n, std::vector<int32_t>& device_of_choice) const;

  // The layer's imbalance figure under `tokens` per expert: the busiest device's tokens over the mean
  // (an expert's tokens shared evenly by its replicas); 0 without tokens.
  double imbalance(uint32_t layer, const std::vector<uint64_t>& tokens) const;

 private:
  struct Layer {
    uint32_t per_device = 0;
    std::vector<int32_t> slots;
    std::vector<std::vector<int32_t>> replicas;  // [expert]: the device of each of its slots
  };
  void index(Layer& layer) const;

  uint32_t n_experts_, devices_;
  std::vector<Layer> layers_;
};

}  // namespace tokenhost
