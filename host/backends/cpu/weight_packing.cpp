#include "backends/cpu/weight_packing.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "model/quant.hpp"
#include "backends/cpu/matmul.hpp"

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
  size_t packed = 0, count = 0;
  for (WeightView* m : matrices) {
    std::shared_ptr<void> copy = pack_weight(*m);
    if (!copy) continue;
    packed += m->packed_row_bytes * size_t(m->rows);
    ++count;
    w.packed_storage.push_back(std::move(copy));
  }
  w.packed_bytes += packed;
  if (count == 0) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("model {}: {} {} matrices packed for the {} matmul kernels in {:.0f} ms: {:.1f} MiB more memory "
               "(pack_weights = false in its manifest table, or TOKENHOST_PACK_WEIGHTS=0, turns it off)",
               w.spec.name, count, quant::dtype_name(w.spec.info.weight_dtype), matmul_kernels(), ms,
               double(packed) / (1 << 20));
}

}  // namespace tokenhost
