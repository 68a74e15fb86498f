#include "backends/cpu/weight_packing.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "model/quant.hpp"
#include "backends/cpu/matmul.hpp"
#include "base/devices.hpp"

namespace tokenhost {

void pack_model_weights(ModelWeights& w) {
  if (const char* env = std::getenv("TOKENHOST_PACK_WEIGHTS"); env != nullptr && std::strcmp(env, "0") == 0) return;
  const auto started = std::chrono::steady_clock::now();
  std::vector<WeightView*> matrices;
  for (auto& L : w.layers) {
    for (WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo}) matrices.push_back(m);
    if (w.spec.info.n_experts == 0)
      for (WeightView* m : {&L.experts[0].gate, &L.experts[0].up, &L.experts[0].down}) matrices.push_back(m);
    if (!L.shared_expert.empty())
      for (WeightView* m : {&L.shared_expert.gate, &L.shared_expert.up, &L.shared_expert.down}) matrices.push_back(m);
  }
  matrices.push_back(&w.output);
  // One allocation for every copy: from 8 MiB on the CPU backend places it in huge pages, where each
  // copy on its own (most are below that) took 4 KiB pages, a TLB entry per 4 KiB the products stream.
  constexpr size_t kAlign = 64;
  std::vector<size_t> sizes, offsets;  // each copy's bytes, and where it starts (64-byte aligned)
  size_t packed = 0, count = 0;
  for (WeightView* m : matrices) {
    sizes.push_back(packed_size(*m));
    offsets.push_back(packed);
    packed += (sizes.back() + kAlign - 1) / kAlign * kAlign;
    count += sizes.back() > 0;
  }
  if (count == 0) return;
  std::string why;
  auto* arena = static_cast<uint8_t*>(device_alloc(TH_DEVICE_CPU, 0, packed, kAlign, why));
  if (arena == nullptr) throw std::runtime_error("model " + w.spec.name + ": packing its matrices: " + why);
  w.packed_storage.emplace_back(arena, [](void* p) { device_free(TH_DEVICE_CPU, p); });
  for (size_t i = 0; i < matrices.size(); ++i)
    if (sizes[i] > 0) pack_weight_into(*matrices[i], arena + offsets[i], sizes[i]);
  w.packed_bytes += packed;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("model {}: {} {} matrices packed for the {} matmul kernels in {:.0f} ms: {:.1f} MiB more memory "
               "(pack_weights = false in its manifest table, or TOKENHOST_PACK_WEIGHTS=0, turns it off)",
               w.spec.name, count, quant::dtype_name(w.spec.info.weight_dtype), matmul_kernels(), ms,
               double(packed) / (1 << 20));
}

}  // namespace tokenhost
