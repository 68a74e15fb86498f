// What fuzz_deployment_manifest links in place of the runtime the deployment reader does not use, and
// the checks between the reader and the functions that write and read model files.
//
// host/manifest/deployment.cpp is compiled for this target with make_model, load_gguf_model and
// materialize_builtin_model renamed to the fuzz_ functions below (fuzz/CMakeLists.txt), which check
// that the path lies in the target's sandbox and then call the real ones. A path outside it aborts:
// the target's filter let through an input that leads out, and that must be fixed here.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "backends/backend.hpp"
#include "base/devices.hpp"
#include "model/builtin_model.hpp"
#include "plugin/instance.hpp"
#include "plugin/library.hpp"
#include "runtime/gguf_model.hpp"
#include "runtime/make_model.hpp"
#include "plugin/step_plugins.hpp"

namespace fs = std::filesystem;

namespace tokenhost {
namespace fuzz {
extern fs::path sandbox;
}  // namespace fuzz

namespace {

void confine(const std::string& path, const char* what) {
  const fs::path p = fs::absolute(path).lexically_normal();
  const auto [end, at] = std::mismatch(fuzz::sandbox.begin(), fuzz::sandbox.end(), p.begin(), p.end());
  if (end != fuzz::sandbox.end()) {
    std::fprintf(stderr, "fuzz_deployment_manifest: %s '%s' is outside the sandbox %s\n", what, path.c_str(),
                 fuzz::sandbox.c_str());
    std::abort();
  }
}

[[noreturn]] void unreachable(const char* what) {
  std::fprintf(stderr, "fuzz_deployment_manifest: the deployment reader called %s\n", what);
  std::abort();
}

// A demo model's weights, about: what make_model writes (f32 at most).
uint64_t parameters(const ModelShape& s) {
  const uint64_t kv = uint64_t(s.dim) / (s.n_heads ? s.n_heads : 1) * s.n_kv_heads;
  const uint64_t experts = s.n_experts ? s.n_experts : 1;
  return uint64_t(s.vocab_size) * s.dim * 2 +
         uint64_t(s.n_layers) * (2ull * s.dim * s.dim + 2ull * s.dim * kv + 3ull * s.dim * s.ffn_dim * experts);
}

}  // namespace

void fuzz_make_model(const MakeModelOptions& options) {
  confine(options.path, "a demo model to write");
  constexpr uint64_t kMaxParameters = uint64_t(4) << 20;
  if (parameters(options.shape) > kMaxParameters)
    throw std::runtime_error("(fuzzing) demo models past 4M parameters are not written");
  make_model(options);
}

LoadedModel fuzz_load_gguf_model(const std::string& path, const std::string& name) {
  confine(path, "a model file to load");
  return load_gguf_model(path, name);
}

std::string fuzz_materialize_builtin_model(const BuiltinModel& model, const std::string& folder) {
  confine(folder, "the builtin model's folder");
  return materialize_builtin_model(model, folder);
}

// The catalog's library loading and instances (plugin/library.cpp, plugin/instance.cpp) and the device
// probe with the CUDA module's memory (base/devices.cpp, which opens the module): not linked, never
// reached by the reader.
std::shared_ptr<PluginLibrary> PluginLibrary::open(const PluginManifest&) { unreachable("PluginLibrary::open"); }
std::shared_ptr<PluginInstance> PluginInstance::create(std::shared_ptr<PluginLibrary>, const InstanceSpec&) {
  unreachable("PluginInstance::create");
}
const std::vector<DeviceInfo>& devices() { unreachable("devices()"); }
void* cuda_module_alloc(int32_t, size_t, std::string&, th_status&) { unreachable("cuda_module_alloc"); }
void cuda_module_free(void*) { unreachable("cuda_module_free"); }

// The CPU backend as the reader sees it: its kind and which devices it runs on (cannot_run, as
// backends/cpu/cpu_backend.cpp says it), without the forward pass and kernels it would link. The CUDA
// backend is the real one (backends/cuda/cuda_backend.cpp).
namespace {
class CpuBackend final : public Backend {
 public:
  th_device_kind kind() const override { return TH_DEVICE_CPU; }
  std::vector<DeviceInfo> devices() const override { unreachable("CpuBackend::devices"); }
  std::string cannot_run(int32_t index) const override {
    return index == 0 ? "" : "the CPU is device cpu (or cpu:0); there is no cpu:" + std::to_string(index);
  }
  void* alloc(int32_t, size_t, size_t, std::string&, th_status&) const override { unreachable("CpuBackend::alloc"); }
  void free(void*) const override { unreachable("CpuBackend::free"); }
  std::shared_ptr<const ModelWeights> place_weights(std::shared_ptr<const ModelWeights>, int32_t,
                                                    const WeightPlacement&) const override {
    unreachable("CpuBackend::place_weights");
  }
  std::vector<std::vector<float>> run_step(const ModelWeights&, const StepBatch&, const StepPlugins&) const override {
    unreachable("CpuBackend::run_step");
  }
  void shift_keys(const ModelWeights&, PluginInstance&, uint64_t, uint32_t, uint32_t, uint32_t) const override {
    unreachable("CpuBackend::shift_keys");
  }
};
}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace tokenhost
