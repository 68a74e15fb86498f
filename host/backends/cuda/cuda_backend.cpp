// The CUDA backend as the host sees it: its devices come from the CUDA module (cuda_module.cpp, opened
// at run time by base/devices.cpp), which finds devices and allocates memory. It has no forward pass
// yet, so it runs no engine: cannot_run() says so, and manifests naming "cuda:N" are refused with it.
#include "backends/backend.hpp"
#include "plugin/step_plugins.hpp"

#include <stdexcept>

namespace tokenhost {
namespace {

constexpr size_t kCudaMallocAlignment = 256;  // cudaMalloc's guarantee

class CudaBackend final : public Backend {
 public:
  std::vector<DeviceInfo> devices() const override {
    std::vector<DeviceInfo> out;
    for (const auto& d : tokenhost::devices())
      if (d.kind == TH_DEVICE_CUDA) out.push_back(d);
    return out;
  }
  th_device_kind kind() const override { return TH_DEVICE_CUDA; }
  void* alloc(int32_t index, size_t bytes, size_t alignment, std::string& why, th_status& status) const override {
    if (alignment > kCudaMallocAlignment) {
      why = "alignment " + std::to_string(alignment) + " is more than CUDA allocations give (" +
            std::to_string(kCudaMallocAlignment) + ")";
      status = TH_ERR_INVALID_ARGUMENT;
      return nullptr;
    }
    return cuda_module_alloc(index, bytes, why, status);
  }
  void free(void* ptr) const override { cuda_module_free(ptr); }
  std::string cannot_run(int32_t) const override {
    return "the CUDA backend does not compute yet (this host runs engines on the CPU only)";
  }
  std::shared_ptr<const ModelWeights> place_weights(std::shared_ptr<const ModelWeights>, int32_t index,
                                                    const WeightPlacement&) const override {
    throw std::runtime_error("cuda:" + std::to_string(index) + ": " + cannot_run(index));
  }
  std::vector<std::vector<float>> run_step(const ModelWeights&, const StepBatch&, const StepPlugins&) const override {
    throw std::runtime_error(cannot_run(0));
  }
  void shift_keys(const ModelWeights&, PluginInstance&, uint64_t, uint32_t, uint32_t, uint32_t) const override {
    throw std::runtime_error(cannot_run(0));
  }
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace tokenhost
