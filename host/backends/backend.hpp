// A compute backend: the devices it drives, where a model's weights live for it, and one step of the
// forward pass on one of its devices. ggml's split in small: a registry (backends()), devices
// (DeviceInfo) and buffers (device_alloc, the host API's mem_alloc). host/backends/<name>/ implements
// one; an engine's worker runs every step through the backend of its device ("cpu", "cuda:N").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/device_memory.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/step.hpp"

namespace tokenhost {

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda": what a manifest's device says before ':'.
  virtual const char* name() const = 0;
  // Its devices found on this machine (none: no such hardware, or its module is absent).
  virtual std::vector<DeviceInfo> devices() const = 0;
  // Why it cannot run an engine on its device `index` now, or "" when it can.
  virtual std::string cannot_run(int32_t index) const = 0;
  // A model's weights as this backend computes with them on device `index` (the CPU backend: as
  // loaded, the file mapped and the packed copies made). Throws std::runtime_error when it cannot.
  virtual std::shared_ptr<const ModelWeights> place_weights(std::shared_ptr<const ModelWeights> weights,
                                                            int32_t index) const = 0;
  // One step: the logits of every row the batch marks (StepItem::marked_rows()), [n_marked][vocab],
  // in item then row order. Throws std::runtime_error naming the plugin and call that failed, and
  // KvExhausted when the kvcache has no blocks for the step.
  virtual std::vector<std::vector<float>> run_step(const ModelWeights& weights, const StepBatch& batch,
                                                   const StepPlugins& plugins) const = 0;
};

// Every backend of this host, the CPU first.
const std::vector<const Backend*>& backends();
// The backend of a device string ("cpu", "cuda:0"), or NULL when none has its name; index is set to
// the number after ':' (0 without one).
const Backend* find_backend(const std::string& device, int32_t* index = nullptr);

}  // namespace tokenhost
