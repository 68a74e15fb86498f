// The CPU backend: the host's own forward pass (backends/cpu/forward.cpp) and SIMD kernels on the compute
// pool, over weights as they were loaded.
#include "backends/backend.hpp"
#include "backends/cpu/forward.hpp"

namespace tokenhost {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  std::vector<DeviceInfo> devices() const override { return {tokenhost::devices().front()}; }
  std::string cannot_run(int32_t index) const override {
    return index == 0 ? "" : "the CPU is device cpu (or cpu:0); there is no cpu:" + std::to_string(index);
  }
  std::shared_ptr<const ModelWeights> place_weights(std::shared_ptr<const ModelWeights> weights, int32_t) const override {
    return weights;  // computed in place: mapped, with the packed copies made at load
  }
  std::vector<std::vector<float>> run_step(const ModelWeights& weights, const StepBatch& batch,
                                           const StepPlugins& plugins) const override {
    return forward_step(weights, batch, plugins);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace tokenhost
