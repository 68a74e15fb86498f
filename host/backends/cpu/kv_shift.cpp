// A sliding window's key shift on the CPU: the keys the kvcache moved down (seq_drop_blocks) are
// rotated back by the positions they moved, so each key's rotation matches its new position.
#include <tokenhost/plugin_kv.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/forward.hpp"
#include "backends/cpu/rope.hpp"
#include "model/quant.hpp"
#include "base/compute_pool.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {

void shift_cached_keys(const ModelWeights& w, PluginInstance& kv, uint64_t seq_id, uint32_t begin, uint32_t end, uint32_t shift) {
  if (begin >= end || shift == 0) return;
  const th_kv_layout* layout = &cpu_kv_layout(w, kv);
  const auto& info = w.spec.info;
  th_error err;
  const int32_t* blocks = nullptr;
  uint32_t n_blocks = 0;
  if (th_status s = kv.call(&th_kvcache_vtable::seq_blocks, "seq_blocks", kv.handle(), seq_id, &blocks, &n_blocks, &err))
    throw_plugin_failure(kv, "seq_blocks", s, err);
  const uint32_t bs = layout->block_size;
  if (uint64_t(n_blocks) * bs < end)
    throw std::runtime_error("plugin " + kv.id() + ": sequence " + std::to_string(seq_id) + " holds " + std::to_string(n_blocks) +
                             " blocks after seq_drop_blocks, fewer than its " + std::to_string(end) + " positions need");
  for (uint32_t b = 0; b < n_blocks; ++b)  // indices the host is about to write through: checked first
    if (blocks[b] < 0 || uint32_t(blocks[b]) >= layout->n_blocks)
      throw std::runtime_error("plugin " + kv.id() + ": block table entry " + std::to_string(b) + " of sequence " +
                               std::to_string(seq_id) + " is block " + std::to_string(blocks[b]) + ", outside the pool of " +
                               std::to_string(layout->n_blocks));
  const std::vector<int32_t> table(blocks, blocks + n_blocks);
  const size_t hd = info.head_dim, nkv = info.n_kv_heads;
  std::vector<double> cos_sin;  // one rotation, by -shift, for every key
  rope_angles({-int32_t(shift)}, hd, w.rope, cos_sin);
  const uint32_t n_positions = end - begin;
  // One (layer, position) pair a task: every kv head of it, through a float copy.
  auto shift_range = [&](size_t first, size_t last) {
    std::vector<float> x(hd * nkv);
    for (size_t task = first; task < last; ++task) {
      const uint32_t l = uint32_t(task / n_positions), p = begin + uint32_t(task % n_positions);
      const int32_t block = table[p / bs];
      const uint32_t slot = p % bs;
      for (uint32_t h = 0; h < nkv; ++h) sdk::load_kv_head(*layout, false, l, block, slot, h, &x[h * hd]);
      rope(x.data(), nkv, hd, cos_sin.data(), w.rope.neox);
      for (uint32_t h = 0; h < nkv; ++h) {  // the pools are the host's to write (th_kvcache.h)
        auto* dst = const_cast<char*>(sdk::kv_head_bytes(*layout, layout->k_base, l, block, slot, h));
        if (layout->dtype != TH_DTYPE_Q8_0) {
          quant::quantize_row(layout->dtype, &x[h * hd], dst, int64_t(hd));
          continue;
        }
        sdk::quantize_kv_q8(&x[h * hd], uint32_t(hd), layout->quant_group, reinterpret_cast<int8_t*>(dst),
                            const_cast<float*>(sdk::kv_head_scales(*layout, layout->k_scale_base, l, block, slot, h)));
      }
    }
  };
  const size_t tasks = size_t(info.n_layers) * n_positions;
  if (tasks * hd * nkv < 16384) shift_range(0, tasks);
  else compute_pool().parallel_for(tasks, shift_range);
}

}  // namespace tokenhost
