#include "actors/swap_latency.hpp"
#include "actors/worker.hpp"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/plugin_json.hpp"
#include "model/quant.hpp"
#include "actors/plugin_seconds.hpp"
#include "plugin/kind.hpp"
#include "runtime/compute_pool.hpp"

namespace tokenhost {
namespace {

struct WorkerState {
  WorkerInit init;
  uint64_t steps = 0;
  metrics::Family* plugin_seconds = nullptr;  // tokenhost_plugin_seconds_total{engine, slot, plugin}
  SwapLatency swaps;
  static inline const char* name = "tokenhost.worker";
};

void count_plugin_seconds(WorkerState& s, const PluginSeconds& t) {
  if (s.plugin_seconds == nullptr) return;
  auto add = [&](const char* slot, const std::shared_ptr<PluginInstance>& p, double seconds) {
    if (p) s.plugin_seconds->add({s.init.engine, slot, p->id()}, seconds);
  };
  add("attention", s.init.attention, t.attention);
  add("kvcache", s.init.kvcache, t.kvcache);
  add("moe", s.init.moe, t.moe);
}

// The next token of each sampled item: its sequence's sampler, or greedy when it has none. Items are
// sampled in parallel on the compute pool (each sampler owns its random state, so the result does
// not depend on the split).
std::vector<SampledToken> sample_all(const StepBatch& batch, std::vector<std::vector<float>>& logits) {
  std::vector<const StepItem*> items;
  std::vector<size_t> last_row;  // each sampled item's last marked row, an index into logits
  size_t row = 0;
  for (const auto& item : batch.items) {
    row += std::min<size_t>(item.marked_rows(), item.tokens.size());
    if (item.sample) {
      items.push_back(&item);
      last_row.push_back(row - 1);
    }
  }
  std::vector<SampledToken> out(items.size());
  auto sample_range = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      auto& l = logits.at(last_row[i]);
      if (items[i]->context) {
        out[i] = items[i]->context->sampler.sample(std::move(l), items[i]->context->tokens);
      } else {
        out[i].token = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
      }
    }
  };
  if (items.size() > 1) compute_pool().parallel_for(items.size(), sample_range);
  else sample_range(0, items.size());
  return out;
}

// Where the worker holds the instance of one of its slots (the slot table's rows it owns), or NULL.
std::shared_ptr<PluginInstance>* held(WorkerInit& s, const std::string& slot) {
  if (slot == "attention") return &s.attention;
  if (slot == "kvcache") return &s.kvcache;
  if (slot == "moe") return &s.moe;
  return nullptr;
}

// The kvcache's published layout, or null when it has none to give.
const th_kv_layout* kv_layout(const PluginInstance& kvcache) {
  const th_kv_layout* layout = nullptr;
  th_error err;
  kvcache.call(&th_kvcache_vtable::get_layout, "get_layout", kvcache.handle(), &layout, &err);
  return layout;
}

KvState kv_state(const PluginInstance& kvcache) {
  th_kv_stats stats{};
  stats.struct_size = sizeof stats;
  kvcache.call(&th_kvcache_vtable::stats, "stats", kvcache.handle(), &stats);
  const th_kv_layout* layout = kv_layout(kvcache);
  return KvState{stats.total_blocks, stats.free_blocks, layout != nullptr ? layout->block_size : 0};
}

uint32_t kv_seqs(const PluginInstance& kvcache) {
  th_kv_stats stats{};
  stats.struct_size = sizeof stats;
  kvcache.call(&th_kvcache_vtable::stats, "stats", kvcache.handle(), &stats);
  return stats.n_seqs;
}

worker_actor::behavior_type worker(worker_actor::stateful_pointer<WorkerState> self, WorkerInit init) {
  self->state.init = std::move(init);
  if (auto* r = self->state.init.metrics)
    self->state.plugin_seconds = &plugin_seconds_family(*r);
  self->state.swaps.bind(self->state.init.metrics, self->state.init.engine);
  return {
      [=](step_atom, const StepBatch& batch) -> StepResult {
        auto& s = self->state;
        StepResult result;
        s.swaps.step_started();
        try {
          auto started = std::chrono::steady_clock::now();
          PluginSeconds seconds;
          auto logits = s.init.backend->run_step(*s.init.weights, batch,
                                                 {s.init.attention.get(), s.init.kvcache.get(), s.init.moe.get(), &seconds});
          count_plugin_seconds(s, seconds);
          result.sampled = sample_all(batch, logits);
          result.kv = kv_state(*s.init.kvcache);
          result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        } catch (const KvExhausted& e) {
          result.error = e.what();
          result.status = TH_ERR_RESOURCE_EXHAUSTED;
          result.kv = kv_state(*s.init.kvcache);
        } catch (const std::exception& e) {
          result.error = e.what();
          result.status = TH_ERR_INTERNAL;
          result.kv = kv_state(*s.init.kvcache);
        }
        ++s.steps;
        return result;
      },
      [=](free_atom, uint64_t seq_id) -> KvState {
        auto& kv = *self->state.init.kvcache;
        kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), seq_id);
        return kv_state(kv);
      },
      [=](status_atom) -> KvState { return kv_state(*self->state.init.kvcache); },
      [=](swap_atom, SlotSwap swap) -> SwapResult {
        auto& s = self->state.init;
        std::shared_ptr<PluginInstance>* slot = held(s, swap.slot);
        const SlotInfo* info = find_slot(swap.slot);
        if (slot == nullptr || info == nullptr || info->owner != SlotOwner::worker)
          return {false, "the worker has no slot '" + swap.slot + "'"};
        if (!*slot) return {false, "engine " + s.engine + " serves a dense model: it has no " + swap.slot + " slot"};
        if (info->swap == SwapMode::new_engine && kv_seqs(*s.kvcache) > 0) {
          return {false, "the kvcache of engine " + s.engine + " holds " + std::to_string(kv_seqs(*s.kvcache)) +
                             " sequences: a KV layout change needs the engine drained first"};
        }
        std::string old = (*slot)->id() + " " + (*slot)->version();
        // The old instance is released here, between steps: no step is using it any more.
        *slot = std::move(swap.instance);
        self->state.swaps.applied(swap.slot, swap.requested_ns, swap.engine_idle);
        spdlog::info("engine {}: {} swapped {} -> {} {}", s.engine, swap.slot, old, (*slot)->id(), (*slot)->version());
        return {true, swap.slot + ": " + old + " -> " + (*slot)->id() + " " + (*slot)->version()};
      },
      [=](status_atom, const std::string&) -> StatusJson {
        auto& s = self->state;
        auto kv = kv_state(*s.init.kvcache);
        const th_kv_layout* layout = kv_layout(*s.init.kvcache);
        nlohmann::json j = {{"steps", s.steps},
                            {"kv", {{"total_blocks", kv.total_blocks}, {"free_blocks", kv.free_blocks}, {"block_size", kv.block_size},
                                    {"dtype", layout != nullptr ? quant::dtype_name(layout->dtype) : "unknown"}}}};
        for (const SlotInfo& slot : slot_table())  // each filled slot the worker owns, under its name
          if (auto* p = slot.owner == SlotOwner::worker ? held(s.init, slot.name) : nullptr; p && *p)
            j[slot.name] = plugin_json(*p);
        j["last_worker_swap"] = s.swaps.last();
        return {j.dump()};
      },
  };
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, WorkerInit init) {
  return sys.spawn<caf::detached>(worker, std::move(init));
}

}  // namespace tokenhost
