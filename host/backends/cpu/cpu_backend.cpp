// The CPU backend: the host's own forward pass (backends/cpu/forward.cpp) and SIMD kernels on the compute
// pool, over weights in the model file's layout plus, where the kernels have one, a packed copy.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "backends/backend.hpp"
#include "backends/cpu/forward.hpp"
#include "backends/cpu/matmul.hpp"
#include "backends/cpu/weight_packing.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {
namespace {

// Allocations from this size on are placed on 2 MiB boundaries and asked to be backed by huge pages
// (transparent huge pages, where the kernel offers them for madvise'd memory): a KV cache of gigabytes
// is filled in 512 times fewer page faults (a 1.9 GB pool took ~4 s to zero in 4 KiB pages), and
// attention, which walks its blocks all over the pool, misses the TLB far less.
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeFrom = size_t(8) << 20;

class CpuBackend final : public Backend {
 public:
  th_device_kind kind() const override { return TH_DEVICE_CPU; }
  std::vector<DeviceInfo> devices() const override { return {tokenhost::devices().front()}; }
  std::string cannot_run(int32_t index) const override {
    return index == 0 ? "" : "the CPU is device cpu (or cpu:0); there is no cpu:" + std::to_string(index);
  }

  void* alloc(int32_t index, size_t bytes, size_t alignment, std::string& why, th_status& status) const override {
    if (index != 0) {
      why = "no CPU device " + std::to_string(index) + " (the CPU is device 0)";
      status = TH_ERR_UNSUPPORTED;
      return nullptr;
    }
    // More than the machine has never succeeds (and some allocators abort rather than answer null).
    if (const uint64_t memory = tokenhost::devices().front().memory_bytes; memory > 0 && bytes > memory) {
      why = "out of host memory: " + std::to_string(bytes) + " bytes asked, the machine has " + std::to_string(memory);
      status = TH_ERR_OUT_OF_MEMORY;
      return nullptr;
    }
    if (bytes >= kHugeFrom) alignment = std::max(alignment, kHugePage);
    const size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) {
      why = "out of host memory allocating " + std::to_string(bytes) + " bytes";
      status = TH_ERR_OUT_OF_MEMORY;
      return nullptr;
    }
#if defined(MADV_HUGEPAGE)
    if (bytes >= kHugeFrom) madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure changes nothing
#endif
    return p;
  }
  void free(void* ptr) const override { std::free(ptr); }

  std::shared_ptr<const ModelWeights> place_weights(std::shared_ptr<const ModelWeights> weights, int32_t,
                                                    const WeightPlacement& placement) const override {
    if (!placement.pack || weights->packed_bytes > 0) return weights;  // computed in place, as mapped
    // A shallow copy (views, the mapping shared) that also holds the packed copies.
    auto packed = std::make_shared<ModelWeights>(*weights);
    pack_model_weights(*packed);
    if (packed->packed_bytes == 0) return weights;  // the kernels in use have no packed layout for it
    return packed;
  }

  th_status grouped_matmul(const th_grouped_matmul_args& a, std::string&) const override {
    std::vector<WeightView> weights(size_t(a.n_groups) * a.n_products);
    std::vector<MatmulGroup> groups(a.n_groups);
    for (uint32_t g = 0; g < a.n_groups; ++g) {
      for (uint32_t j = 0; j < a.n_products; ++j) {
        const th_tensor& t = a.weights[size_t(g) * a.n_products + j];
        weights[size_t(g) * a.n_products + j] = WeightView{t.dtype, t.ne[1], t.ne[0], size_t(t.nb[1]), t.data};
      }
      groups[g] = {&weights[size_t(g) * a.n_products], a.row_begin[g], size_t(a.row_begin[g + 1] - a.row_begin[g])};
    }
    tokenhost::grouped_matmul(groups.data(), groups.size(), a.n_products, a.x, a.y);
    return TH_OK;
  }
  std::vector<std::vector<float>> run_step(const ModelWeights& weights, const StepBatch& batch,
                                           const StepPlugins& plugins) const override {
    return forward_step(weights, batch, plugins);
  }
  void shift_keys(const ModelWeights& weights, PluginInstance& kvcache, uint64_t seq_id, uint32_t begin, uint32_t end,
                  uint32_t shift) const override {
    shift_cached_keys(weights, kvcache, seq_id, begin, end, shift);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace tokenhost
