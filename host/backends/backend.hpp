// A compute backend: the devices it drives, memory on them, where a model's weights live for it, and one
// step of the forward pass on one of its devices. ggml's split in small: a registry (backends()),
// devices (DeviceInfo), buffers (alloc/free, which the host API's mem_alloc reaches through
// device_alloc) and compute (run_step). host/backends/<name>/ implements one; an engine's worker runs
// every step through the backend of its device ("cpu", "cuda:N").
//
// Layers: backends sit above base/ (devices, weights, step types) and plugin/ (the instances a step
// calls), below the runtime. Device memory's entry (device_alloc) is declared in base/devices.hpp for
// the plugin host and defined here, with the registry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/devices.hpp"

namespace tokenhost {

struct ModelWeights;  // base/model_weights.hpp
struct StepBatch;     // base/step.hpp
struct StepPlugins;   // plugin/step_plugins.hpp
class PluginInstance;  // plugin/instance.hpp

// How a deployment asks a model's weights to be placed (its [models.X] table).
struct WeightPlacement {
  // CPU: also keep the matrices packed for the matmul kernels in use (backends/cpu/weight_packing.hpp),
  // memory beside the file's layout that batched steps gain from. `pack_weights` in a manifest.
  bool pack = true;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The kind of its devices; its name ("cpu", "cuda": what a manifest's device says before ':') is
  // the kind's, from base/devices.hpp's table.
  virtual th_device_kind kind() const = 0;
  const char* name() const { return device_kind_name(kind()); }
  // Its devices found on this machine (none: no such hardware, or its module is absent).
  virtual std::vector<DeviceInfo> devices() const = 0;
  // Why it cannot run an engine on its device `index` now, or "" when it can.
  virtual std::string cannot_run(int32_t index) const = 0;

  // bytes on device `index`, aligned to alignment (a power of two); NULL with why set and *status
  // TH_ERR_UNSUPPORTED when the device is absent, TH_ERR_OUT_OF_MEMORY when it has no room.
  // OWNERSHIP: the caller's, returned through free().
  virtual void* alloc(int32_t index, size_t bytes, size_t alignment, std::string& why, th_status& status) const = 0;
  virtual void free(void* ptr) const = 0;

  // A model's weights as this backend computes with them on device `index` (the CPU backend: in place,
  // the file mapped, plus the packed copies `placement` asks for). The result may share memory with
  // `weights`; a caller that serves several engines on one device places once and shares the result.
  // Throws std::runtime_error when it cannot.
  virtual std::shared_ptr<const ModelWeights> place_weights(std::shared_ptr<const ModelWeights> weights, int32_t index,
                                                            const WeightPlacement& placement) const = 0;
  // th_host_api.grouped_matmul on this backend's device, its arguments checked (base/devices.hpp):
  // TH_OK, or a status with why set. The default: TH_ERR_UNSUPPORTED.
  virtual th_status grouped_matmul(const th_grouped_matmul_args& args, std::string& why) const;
  // One step: the logits of every row the batch marks (StepItem::marked_rows()), [n_marked][vocab],
  // in item then row order. Throws std::runtime_error naming the plugin and call that failed, and
  // KvExhausted when the kvcache has no blocks for the step.
  virtual std::vector<std::vector<float>> run_step(const ModelWeights& weights, const StepBatch& batch,
                                                   const StepPlugins& plugins) const = 0;
  // Sliding window: the kvcache moved seq_id's positions [begin, end) down from begin + shift
  // (th_kvcache_vtable.seq_drop_blocks); their keys, rotated for where they were, are re-rotated by
  // -shift positions (RoPE composes: rotating by p then by -shift is rotating by p - shift), rewritten
  // in the cache's dtype. Throws std::runtime_error naming the plugin and call that failed.
  virtual void shift_keys(const ModelWeights& weights, PluginInstance& kvcache, uint64_t seq_id, uint32_t begin, uint32_t end,
                          uint32_t shift) const = 0;
};

// Every backend of this host, the CPU first.
const std::vector<const Backend*>& backends();
// The backend of a device string ("cpu", "cuda:0"), or NULL with why set when the string names no
// device kind (parse_device) or this host has no backend for its kind; index is set to the number
// after ':' (0 without one).
const Backend* find_backend(const std::string& device, int32_t* index = nullptr, std::string* why = nullptr);
// The backend whose devices are of `kind`, or NULL.
const Backend* find_backend(th_device_kind kind);


}  // namespace tokenhost
