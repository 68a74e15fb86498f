#include "actors/swap_latency.hpp"
#include "actors/worker.hpp"

#include "actors/constraints.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <tokenhost/plugin_kv.hpp>

#include "actors/kv_connectors.hpp"
#include "actors/plugin_json.hpp"
#include "api/api_error.hpp"
#include "model/quant.hpp"
#include "actors/plugin_seconds.hpp"
#include "plugin/kind.hpp"
#include "base/compute_pool.hpp"
#include "actors/expert_balance.hpp"
#include "base/expert_load.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {
namespace {

struct WorkerState {
  WorkerInit init;
  uint64_t steps = 0;
  metrics::Family* plugin_seconds = nullptr;  // tokenhost_plugin_seconds_total{engine, slot, plugin}
  SwapLatency swaps;
  std::unique_ptr<KvConnectors> connectors;  // the kv_connector stack's bookkeeping (made at start)
  // A connector's receive() threw (kv_peer_atom answers nobody): the next step or poll reports it, and
  // the engine stops for it as for any fault of its plugins.
  std::optional<PluginFault> receive_fault;
  std::chrono::steady_clock::time_point last_undelivered{};  // the last message no layer took, logged
  // Structured output: the constraint plugin's programs and each constrained sequence's state.
  std::unique_ptr<Constraints> constraints;
  // An MoE model's tokens per layer and expert (NULL for a dense one), exported after each step.
  std::unique_ptr<ExpertLoad> expert_load;
  metrics::Family* expert_tokens = nullptr;     // tokenhost_moe_expert_tokens_total{engine, layer, expert}
  metrics::Family* expert_imbalance = nullptr;  // tokenhost_moe_expert_imbalance{engine, layer}
  // Its experts over compute partitions (an engine with expert_partitions), NULL otherwise.
  std::unique_ptr<ExpertBalance> expert_balance;
  // The connectors go before the kvcache: a load still writing into the pool ends in their destroy(),
  // while the pool is there.
  ~WorkerState() { init.plugins.stack(slot_of(TH_KIND_KV_CONNECTOR)).clear(); }
  static inline const char* name = "tokenhost.worker";
};

void count_plugin_seconds(WorkerState& s, const PluginSeconds& t) {
  if (s.plugin_seconds == nullptr) return;
  for (SlotId slot : slots_owned_by(SlotOwner::worker))
    if (const PluginInstance* p = s.init.plugins.get(slot)) s.plugin_seconds->add({s.init.engine, slot.name(), p->id()}, t[slot]);
}

// Draft positions are reserved after every item's own tokens, so that a draft never takes the blocks
// the scheduler counted on for another sequence: a draft the pool cannot hold is dropped (the item
// decodes one token), never a reason to preempt. Throws KvExhausted when an item's own tokens do not fit
// (the scheduler over-committed, as without drafts).
void reserve_drafts(StepBatch& batch, PluginInstance& kv) {
  auto reserve = [&](const StepItem& item, uint32_t end, th_error& err) {
    return kv.call(&th_kvcache_vtable::seq_reserve, "seq_reserve", kv.handle(), item.seq_id, end, item.start, &err);
  };
  for (const auto& item : batch.items) {  // every item's own positions, drafted or not
    th_error err;
    if (th_status st = reserve(item, item.start + uint32_t(item.tokens.size()) - item.n_draft, err))
      throw_plugin_failure(kv, "seq_reserve", st, err);
  }
  for (auto& item : batch.items) {
    th_error err;
    if (item.n_draft == 0 || reserve(item, item.start + uint32_t(item.tokens.size()), err) == TH_OK) continue;
    item.cut_draft(0);
  }
}

// A tree's accepted path (draft token indices, root first) lies at the positions of those tokens; the
// sequence goes on from the first positions after its own tokens: each accepted token's keys and
// values move there (in path order: a token's index is at least its depth, so no move overwrites a
// token still to move).
void compact_tree_kv(const StepItem& item, const std::vector<uint32_t>& path, PluginInstance& kv) {
  const th_kv_layout* layout = kv_layout(kv);
  const int32_t* blocks = nullptr;
  uint32_t n_blocks = 0;
  th_error err;
  if (layout == nullptr) throw std::runtime_error(kv.id() + " has no KV layout to move a draft tree's accepted keys in");
  if (th_status st = kv.call(&th_kvcache_vtable::seq_blocks, "seq_blocks", kv.handle(), item.seq_id, &blocks, &n_blocks, &err))
    throw_plugin_failure(kv, "seq_blocks", st, err);
  const uint32_t base = item.start + uint32_t(item.tokens.size()) - item.n_draft, bs = layout->block_size;
  const size_t bytes = sdk::kv_vector_bytes(layout->dtype, layout->head_dim);
  // q8_0 (ABI 1.6): each head vector's group scales move with it.
  const size_t scale_bytes = sdk::kv_scale_bytes(layout->dtype, layout->head_dim, layout->quant_group);
  // The pools are the host's to write (th_kvcache.h); the address formula is the SDK's.
  auto at = [&](const void* pool, uint32_t l, uint32_t position, uint32_t h) {
    return const_cast<char*>(sdk::kv_head_bytes(*layout, pool, l, blocks[position / bs], position % bs, h));
  };
  auto scales_at = [&](const void* pool, uint32_t l, uint32_t position, uint32_t h) {
    return const_cast<float*>(sdk::kv_head_scales(*layout, pool, l, blocks[position / bs], position % bs, h));
  };
  for (uint32_t k = 0; k < path.size(); ++k) {
    if (path[k] == k) continue;
    const uint32_t from = base + path[k], to = base + k;
    if (from / bs >= n_blocks) throw std::runtime_error(kv.id() + " holds no block for draft position " + std::to_string(from));
    for (uint32_t l = 0; l < layout->n_layers; ++l)
      for (uint32_t h = 0; h < layout->n_kv_heads; ++h) {
        for (const void* pool : {layout->k_base, layout->v_base}) std::memmove(at(pool, l, to, h), at(pool, l, from, h), bytes);
        if (scale_bytes > 0)
          for (const void* pool : {layout->k_scale_base, layout->v_scale_base})
            std::memmove(scales_at(pool, l, to, h), scales_at(pool, l, from, h), scale_bytes);
      }
  }
}

// Gives back the positions of rejected draft tokens: each sequence keeps its own tokens and the run the
// target accepted (result.accepted, one per sampled item; a tree's path moved to the first positions
// first), so the cache's accounting, which the scheduler plans with, stays exact.
void truncate_drafts(const StepBatch& batch, const StepResult& result, const std::vector<std::vector<uint32_t>>& paths,
                     PluginInstance& kv) {
  size_t sampled = 0;
  for (const auto& item : batch.items) {
    if (!item.sample) continue;
    const std::vector<uint32_t>& path = paths.at(sampled);
    const uint32_t accepted = result.accepted.at(sampled++);
    if (item.is_tree() && !path.empty()) compact_tree_kv(item, path, kv);
    if (item.n_draft == 0 || accepted == item.n_draft) continue;
    const uint32_t keep = item.start + uint32_t(item.tokens.size()) - item.n_draft + accepted;
    th_error err;
    if (th_status st = kv.call(&th_kvcache_vtable::seq_truncate, "seq_truncate", kv.handle(), item.seq_id, keep, &err))
      throw_plugin_failure(kv, "seq_truncate", st, err);
  }
}

// The tokens of each sampled item: its sequence's sampler (greedy when it has none) on its first
// marked row; with a draft, on the next row too while the token sampled equals the draft's there, each
// row sampled with the tokens accepted before it in the history, exactly as decoding them one step at
// a time would (the sampler's random state advances once per token sampled). A draft token given with
// its proposer's distribution is verified by speculative sampling instead (accepted with p/q, else a
// token drawn from the residual): the same distribution as plain decoding, not the same draws. In a
// tree the next row is that of the first child whose token equals the one sampled. Items are sampled in
// parallel on the compute pool (each sampler owns its random state, so the result does not depend on
// the split). paths: per sampled item, the accepted draft tokens' indices.
void sample_all(const StepBatch& batch, std::vector<std::vector<float>>& logits, const std::vector<RowMasks>& masks,
                StepResult& result, std::vector<std::vector<uint32_t>>& paths) {
  std::vector<const StepItem*> items;
  std::vector<size_t> first_row;  // each sampled item's first marked row, an index into logits
  size_t row = 0;
  for (const auto& item : batch.items) {
    const size_t marked = std::min<size_t>(item.marked_rows(), item.tokens.size());
    row += marked;
    if (item.sample) {
      items.push_back(&item);
      first_row.push_back(row - (item.n_draft > 0 ? item.n_draft + 1 : 1));
    }
  }
  std::vector<std::vector<SampledToken>> runs(items.size());
  std::vector<std::string> errors(items.size());
  paths.assign(items.size(), {});
  auto sample_range = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const StepItem& item = *items[i];
      const RowMasks* mask = i < masks.size() && masks[i].constrained() ? &masks[i] : nullptr;
      if (mask != nullptr && !mask->error.empty()) {  // the sequence fails; its token is never used
        errors[i] = mask->error;
        runs[i].push_back(SampledToken{});
        continue;
      }
      const int32_t* draft = item.tokens.data() + item.tokens.size() - item.n_draft;
      std::vector<int32_t>* history = item.context ? &item.context->tokens : nullptr;
      const bool tree = item.is_tree();
      // The draft token whose row comes next: -1 for the item's own last token, then the child taken.
      int32_t at = -1;
      for (;;) {
        auto& l = logits.at(first_row[i] + size_t(at + 1));
        // The candidates after `at`: in a chain the next token, in a tree every child.
        int32_t next = -1;
        SampledToken t;
        bool accepted = false;
        const uint32_t r = uint32_t(at + 1);
        // Under a constraint, only the tokens it allows after the row's text (a draft token it refused
        // has no row state: the row before never accepts it).
        if (mask != nullptr && (!mask->live.at(r) || !mask->apply(r, l))) {
          const size_t generated = history ? history->size() - std::min(history->size(), item.context->prompt_tokens) : 0;
          errors[i] = mask->live.at(r) ? "the constraint allows no token after " + std::to_string(generated) +
                                             " generated tokens: the output cannot go on under it"
                                       : "the constraint plugin allowed a draft token it then refused";
          runs[i].push_back(SampledToken{});
          break;
        }
        if (!tree && history && r < item.n_draft && !item.draft_dist.empty() && !item.draft_dist[r].empty()) {
          // A draft token with its proposer's distribution: speculative sampling.
          t = item.context->sampler.verify_draft(std::move(l), *history, draft[r], item.draft_dist[r], accepted);
          next = int32_t(r);
        } else {
          if (history) t = item.context->sampler.sample(std::move(l), *history);
          else t.token = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
          for (uint32_t c = r; c < item.n_draft && !accepted; ++c) {
            if ((tree ? item.draft_parent[c] : int32_t(c) - 1) != at) continue;
            accepted = draft[c] == t.token;
            next = int32_t(c);
            if (!tree) break;
          }
        }
        runs[i].push_back(t);
        if (!accepted) break;
        paths[i].push_back(uint32_t(next));
        at = next;
        if (history) history->push_back(t.token);  // the next row's history; taken back below
      }
      if (history) history->resize(history->size() - (runs[i].size() - 1));
    }
  };
  if (items.size() > 1) compute_pool().parallel_for(items.size(), sample_range);
  else sample_range(0, items.size());
  if (std::any_of(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); })) result.item_errors = errors;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    result.drafted.push_back(items[i]->n_draft);
    result.accepted.push_back(uint32_t(run.size() - 1));
    result.sampled.insert(result.sampled.end(), run.begin(), run.end());
  }
}

// Prompt scoring (StepItem::score): each scored item's rows give the log-probability of the token after
// each, but a sampled last row, which sample_all reads as usual. Runs before sample_all (which takes
// the sampled rows' logits).
void score_rows(const StepBatch& batch, const std::vector<std::vector<float>>& logits, StepResult& result) {
  result.scores.assign(batch.items.size(), {});
  size_t row = 0;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const StepItem& item = batch.items[i];
    const size_t marked = std::min<size_t>(item.marked_rows(), item.tokens.size());
    if (item.score && item.n_draft == 0 && marked == item.tokens.size()) {
      const size_t n = item.sample ? marked - 1 : marked;
      const uint32_t top = item.context ? item.context->sampler.params().top_logprobs : 0;
      for (size_t r = 0; r < n; ++r) {
        const int32_t next = r + 1 < item.tokens.size() ? item.tokens[r + 1] : item.score_next;
        if (next < 0) break;
        result.scores[i].push_back(score_token(logits.at(row + r), next, top));
      }
    }
    row += marked;
  }
}

KvState kv_state(const PluginInstance& kvcache) {
  th_kv_stats stats{};
  stats.struct_size = sizeof stats;
  kvcache.call(&th_kvcache_vtable::stats, "stats", kvcache.handle(), &stats);
  const th_kv_layout* layout = kv_layout(kvcache);
  KvState kv{stats.total_blocks, stats.free_blocks, layout != nullptr ? layout->block_size : 0};
  kv.held_blocks = stats.used_blocks;
  // ABI 1.5 members, read only as far as the plugin wrote them. Cached blocks are taken back when the
  // pool needs them: free for planning. Counts past the total are a plugin's error: never trusted.
  if (TH_HAS_MEMBER(&stats, th_kv_stats, cached_blocks))
    kv.cached_blocks = std::min(stats.cached_blocks, stats.total_blocks - std::min(stats.free_blocks, stats.total_blocks));
  if (TH_HAS_MEMBER(&stats, th_kv_stats, held_blocks)) kv.held_blocks = stats.held_blocks;
  if (TH_HAS_MEMBER(&stats, th_kv_stats, evicted_blocks)) kv.evicted_blocks = stats.evicted_blocks;
  if (TH_HAS_MEMBER(&stats, th_kv_stats, published_blocks)) kv.published_blocks = stats.published_blocks;
  kv.free_blocks = std::min(stats.total_blocks, stats.free_blocks + kv.cached_blocks);
  return kv;
}

// seq_lookup of seq_id's tokens, validated: the cached positions (fewer than the tokens), or 0 and a
// message in `error` when the lookup failed or claimed too much (the sequence then stays unknown to
// the plugin, or holds nothing: seq_reserve makes it).
uint32_t lookup_prefix(PluginInstance& kv, uint64_t seq_id, uint64_t salt, const int32_t* tokens, uint32_t n, std::string& error) {
  th_error err;
  uint32_t cached = 0;
  if (th_status st = kv.call(&th_kvcache_vtable::seq_lookup, "seq_lookup", kv.handle(), seq_id, salt, tokens, n, &cached, &err)) {
    error = kv.id() + " seq_lookup failed with " + status_name(st) + ": " + err.text();
    return 0;
  }
  if (cached >= n) {  // the last token is always computed (th_kvcache.h): a plugin claiming more is not trusted
    kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), seq_id);
    error = kv.id() + " seq_lookup reported " + std::to_string(cached) + " cached positions of " + std::to_string(n) +
            " tokens (at most " + std::to_string(n - 1) + ")";
    return 0;
  }
  return cached;
}

// Items the engine marked for a relookup (their sequence found nothing when it arrived and blocks were
// published since): the sequence's record is made again from the chunk's tokens, and the item keeps
// only the tokens past what is now cached (the last one always stays: it may be sampled). Returns the
// positions reused per item.
std::vector<uint32_t> relookup_prefixes(StepBatch& batch, PluginInstance& kv, const std::string& engine, KvConnectors& connectors) {
  std::vector<uint32_t> reused(batch.items.size(), 0);
  for (size_t i = 0; i < batch.items.size(); ++i) {
    StepItem& item = batch.items[i];
    if (!item.relookup || item.start != 0 || item.n_draft != 0 || item.tokens.empty()) continue;
    kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), item.seq_id);  // its arrival's record, holding nothing
    std::string error;
    const uint32_t cached = lookup_prefix(kv, item.seq_id, item.cache_salt, item.tokens.data(), uint32_t(item.tokens.size()), error);
    if (!error.empty()) spdlog::warn("engine {}: prefix relookup of request {} failed: {}", engine, item.seq_id, error);
    if (cached == 0) continue;
    if (const th_kv_layout* layout = kv_layout(kv)) connectors.relooked(item.seq_id, cached, layout->block_size);
    item.tokens.erase(item.tokens.begin(), item.tokens.begin() + cached);
    item.start = cached;
    reused[i] = cached;
  }
  return reused;
}

// After a step, the positions each item wrote and kept go to the prefix cache with their tokens: the
// item's own tokens, then the draft tokens the target accepted (a tree's accepted path, moved to the
// first positions by compact_tree_kv). Rejected drafts were truncated away and never published. A
// sequence the plugin did not make by seq_lookup is ignored by it. A failure costs reuse, not the step:
// it is logged, the step stands.
void publish_step(const StepBatch& batch, const StepResult& result, const std::vector<std::vector<uint32_t>>& paths,
                  PluginInstance& kv, const std::string& engine) {
  size_t sampled = 0;
  std::vector<int32_t> tokens;
  for (const auto& item : batch.items) {
    const size_t own = item.tokens.size() - item.n_draft;
    tokens.assign(item.tokens.begin(), item.tokens.begin() + long(own));
    if (item.sample) {
      const uint32_t accepted = result.accepted.at(sampled);
      const std::vector<uint32_t>& path = paths.at(sampled++);
      for (uint32_t k = 0; k < accepted; ++k) tokens.push_back(item.tokens[own + (item.is_tree() ? path.at(k) : k)]);
    }
    th_error err;
    if (th_status st = kv.call(&th_kvcache_vtable::seq_publish, "seq_publish", kv.handle(), item.seq_id, item.start, tokens.data(),
                               uint32_t(tokens.size()), &err))
      spdlog::warn("engine {}: {} seq_publish of sequence {} failed with {}: {}", engine, kv.id(), item.seq_id, status_name(st),
                   err.text());
  }
}

// Sliding window: seq_id held n_positions; blocks [first_block, first_block + n_blocks) go, the later
// positions move down by n_blocks * block_size and their keys are re-rotated there (the backend's). The
// table the plugin then reports is checked: the blocks before the cut kept, n_blocks fewer in all.
void slide_window(WorkerInit& s, uint64_t seq_id, uint32_t first_block, uint32_t n_blocks, uint32_t n_positions) {
  PluginInstance& kv = s.kvcache();
  const th_kv_layout* layout = kv_layout(kv);
  if (layout == nullptr || layout->block_size == 0) throw std::runtime_error(kv.id() + " has no KV layout to slide a window in");
  auto table = [&]() {
    const int32_t* blocks = nullptr;
    uint32_t n = 0;
    th_error err;
    if (th_status st = kv.call(&th_kvcache_vtable::seq_blocks, "seq_blocks", kv.handle(), seq_id, &blocks, &n, &err))
      throw_plugin_failure(kv, "seq_blocks", st, err);
    return std::vector<int32_t>(blocks, blocks + n);
  };
  if (n_blocks == 0 || uint64_t(first_block + n_blocks) * layout->block_size > n_positions)
    throw std::logic_error("a slide of blocks [" + std::to_string(first_block) + ", " + std::to_string(first_block + n_blocks) +
                           ") of a sequence holding " + std::to_string(n_positions) + " positions");
  const std::vector<int32_t> before = table();
  th_error err;
  if (th_status st = kv.call(&th_kvcache_vtable::seq_drop_blocks, "seq_drop_blocks", kv.handle(), seq_id, first_block, n_blocks, &err))
    throw_plugin_failure(kv, "seq_drop_blocks", st, err);
  const std::vector<int32_t> after = table();
  if (after.size() + n_blocks != before.size() || !std::equal(before.begin(), before.begin() + first_block, after.begin()))
    throw std::runtime_error(kv.id() + " seq_drop_blocks of blocks [" + std::to_string(first_block) + ", " +
                             std::to_string(first_block + n_blocks) + ") of sequence " + std::to_string(seq_id) + " left a table of " +
                             std::to_string(after.size()) + " blocks from " + std::to_string(before.size()) +
                             " (th_kvcache.h: the blocks before the cut kept, the rest moved down)");
  const uint32_t shift = n_blocks * layout->block_size;
  s.backend->shift_keys(*s.weights, kv, seq_id, first_block * layout->block_size, n_positions - shift, shift);
}

// The pool after a failed call: when the kvcache's stats call itself faults (the plugin that failed
// may be the kvcache), an empty state, which the engine stopping for the fault never plans with.
KvState kv_state_after_failure(const PluginInstance& kvcache) {
  try {
    return kv_state(kvcache);
  } catch (const PluginFault&) {
    return KvState{};
  }
}

uint32_t kv_seqs(const PluginInstance& kvcache) {
  th_kv_stats stats{};
  stats.struct_size = sizeof stats;
  kvcache.call(&th_kvcache_vtable::stats, "stats", kvcache.handle(), &stats);
  return stats.n_seqs;
}

// One layer of a stacking slot (kv_connector) replaced, inserted or removed between steps. A layer
// with loads out is not replaced nor removed (its sequences wait on it): the change is refused, to be
// asked again. Saves still out on a layer that goes are forgotten with it.
SwapResult change_layer(WorkerState& st, SlotSwap swap) {
  auto& s = st.init;
  const std::string name = swap.slot.name();
  auto& stack = s.plugins.stack(swap.slot);
  const uint32_t at = swap.layer, size = uint32_t(stack.size());
  using Op = SlotSwap::LayerOp;
  const bool fits = swap.layer_op == Op::insert ? at <= size : at < size;
  if (swap.layer_op == Op::none || !fits)
    return {false, "engine " + s.engine + "'s " + name + " stack has " + std::to_string(size) + " layer(s): no position " +
                       std::to_string(at) + " to " + (swap.layer_op == Op::insert ? "insert at" : "change")};
  if ((swap.layer_op == Op::remove) != !swap.instance) return {false, "a layer change without a plugin instance"};
  if (swap.layer_op != Op::insert)
    if (const size_t out = st.connectors->loads_on(at); out > 0)
      return {false, "layer " + std::to_string(at) + " of engine " + s.engine + "'s " + name + " stack has " + std::to_string(out) +
                         " load(s) out: ask again once they are done"};
  std::string what;
  const std::string old = swap.layer_op == Op::insert ? "" : stack[at]->id() + " " + stack[at]->version();
  const std::string now = swap.instance ? swap.instance->id() + " " + swap.instance->version() : "";
  switch (swap.layer_op) {
    case Op::replace:
      stack[at] = std::move(swap.instance);  // the old instance goes here, between steps
      what = "layer " + std::to_string(at) + ": " + old + " -> " + now;
      break;
    case Op::insert:
      stack.insert(stack.begin() + at, std::move(swap.instance));
      what = "layer " + std::to_string(at) + " inserted: " + now;
      break;
    case Op::remove:
      stack.erase(stack.begin() + at);
      what = "layer " + std::to_string(at) + " removed: " + old;
      break;
    case Op::none: break;
  }
  st.connectors->layer_changed(swap.layer_op == Op::insert ? +1 : swap.layer_op == Op::remove ? -1 : 0, at);
  st.swaps.applied(name, swap.requested_ns, swap.engine_idle);
  spdlog::info("engine {}: {} {}", s.engine, name, what);
  return {true, name + " " + what};
}

// What the step's gate() calls chose, into /metrics: the tokens per layer and expert, and each layer's
// imbalance since the engine started.
void export_expert_load(WorkerState& s) {
  if (!s.expert_load) return;
  std::vector<bool> changed(s.expert_load->n_layers());
  s.expert_load->drain([&](uint32_t layer, uint32_t expert, uint64_t tokens) {
    changed[layer] = true;
    if (s.expert_tokens) s.expert_tokens->add({s.init.engine, std::to_string(layer), std::to_string(expert)}, double(tokens));
  });
  for (uint32_t l = 0; l < changed.size(); ++l)
    if (changed[l] && s.expert_imbalance)
      s.expert_imbalance->set({s.init.engine, std::to_string(l)}, ExpertLoad::imbalance(s.expert_load->totals(l)));
}

// The admin status' view of the expert load: per layer, tokens per expert and the imbalance (the
// busiest expert's tokens over the mean), and the worst layer's.
nlohmann::json expert_load_json(const ExpertLoad& load) {
  nlohmann::json layers = nlohmann::json::array();
  double worst = 0;
  for (uint32_t l = 0; l < load.n_layers(); ++l) {
    const std::vector<uint64_t> tokens = load.totals(l);
    const double imbalance = ExpertLoad::imbalance(tokens);
    worst = std::max(worst, imbalance);
    layers.push_back({{"layer", l}, {"tokens", tokens}, {"imbalance", imbalance}});
  }
  return {{"experts", load.n_experts()}, {"layers", std::move(layers)}, {"max_imbalance", worst}};
}

void rethrow_receive_fault(WorkerState& s) {
  if (!s.receive_fault) return;
  PluginFault fault = std::move(*s.receive_fault);
  s.receive_fault.reset();
  throw fault;
}

// A message from another engine's connector (KvPeerPost): to each layer of the sending plugin that
// takes messages. One that reaches no layer is logged (at most one line a few seconds per engine).
void deliver_peer_message(WorkerState& s, const std::string& from, const std::string& plugin, const std::string& bytes) {
  bool delivered = false;
  for (const auto& layer : s.init.plugins.stack(slot_of(TH_KIND_KV_CONNECTOR))) {
    if (!layer || layer->id() != plugin || layer->fn(&th_kv_connector_vtable::receive) == nullptr) continue;
    delivered = true;
    try {
      layer->call(&th_kv_connector_vtable::receive, "receive", layer->handle(), from.c_str(), bytes.data(), bytes.size());
    } catch (const PluginFault& e) {
      if (!s.receive_fault) s.receive_fault = e;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (!delivered && now - s.last_undelivered > std::chrono::seconds(5)) {
    s.last_undelivered = now;
    spdlog::warn("engine {}: dropped a message of {} bytes from {} on engine {}: no kv_connector layer of {} here takes messages",
                 s.init.engine, bytes.size(), plugin, from, plugin);
  }
}

worker_actor::behavior_type worker(worker_actor::stateful_pointer<WorkerState> self, WorkerInit init) {
  self->state.init = std::move(init);
  if (auto* r = self->state.init.metrics)
    self->state.plugin_seconds = &plugin_seconds_family(*r);
  self->state.swaps.bind(self->state.init.metrics, self->state.init.engine);
  if (const auto& info = self->state.init.weights->spec.info; info.n_experts > 0) {
    self->state.expert_load = std::make_unique<ExpertLoad>(info.n_layers, info.n_experts);
    if (auto* r = self->state.init.metrics) {
      self->state.expert_tokens = &r->family(metrics::Type::counter, "tokenhost_moe_expert_tokens_total",
                                             "Tokens an MoE engine's gate routed to each expert of each layer (a token counts once per expert it uses)",
                                             {"engine", "layer", "expert"});
      self->state.expert_imbalance = &r->family(metrics::Type::gauge, "tokenhost_moe_expert_imbalance",
                                                "Per MoE layer: the busiest expert's tokens over the mean per expert, since the engine started (1: even)",
                                                {"engine", "layer"});
    }
    auto& init = self->state.init;
    if (!init.expert_pools.empty())
      self->state.expert_balance = std::make_unique<ExpertBalance>(init.engine, init.expert_pools, init.expert_partition_names,
                                                                   info.n_layers, info.n_experts, init.expert_slots,
                                                                   init.rebalance_steps, init.metrics);
  }
  self->state.constraints = std::make_unique<Constraints>(self->state.init.engine);
  self->state.connectors =
      std::make_unique<KvConnectors>(self->state.init.engine, self->state.init.model_identity, self->state.init.metrics);
  if (auto post = self->state.init.post) {  // other engines' connectors reach this one's while it runs
    post->enter(self->state.init.engine, caf::actor_cast<worker_actor>(self));
    self->attach_functor([post, engine = self->state.init.engine, me = self->address()] { post->leave(engine, me); });
  }
  return {
      [=](step_atom, StepBatch batch) -> StepResult {
        auto& s = self->state;
        const UseComputePool partition(s.init.pool.get());  // its own cores, or the process-wide pool
        StepResult result;
        s.swaps.step_started();
        try {
          rethrow_receive_fault(s);
          auto started = std::chrono::steady_clock::now();
          const bool drafted = std::any_of(batch.items.begin(), batch.items.end(), [](const StepItem& i) { return i.n_draft > 0; });
          if (drafted && s.init.attention().library().abi_minor() < 4) {
            // Built before tree attention (row_parent): each tree gives its first chain.
            for (auto& item : batch.items)
              if (item.is_tree()) item.cut_draft(item.chain_length()), item.draft_parent.clear();
          }
          if (caches_prefixes(s.init.kvcache()))
            result.reused = relookup_prefixes(batch, s.init.kvcache(), s.init.engine, *s.connectors);
          if (drafted) reserve_drafts(batch, s.init.kvcache());
          PluginSeconds seconds;
          const PluginInstance* moe = s.init.plugins.get(slot_of(TH_KIND_MOE));
          ExpertPartitions* partitions = s.expert_balance && moe ? s.expert_balance->partitions_for(*moe) : nullptr;
          auto logits = s.init.backend->run_step(*s.init.weights, batch,
                                                 {&s.init.plugins, &seconds, s.expert_load.get(), partitions});
          count_plugin_seconds(s, seconds);
          export_expert_load(s);
          if (partitions != nullptr) s.expert_balance->after_step(*moe, *s.expert_load);  // a new placement, when due
          std::vector<std::vector<uint32_t>> paths;
          if (std::any_of(batch.items.begin(), batch.items.end(), [](const StepItem& i) { return i.score; }))
            score_rows(batch, logits, result);
          const auto& constraint = s.init.plugins.stack(slot_of(TH_KIND_CONSTRAINT));
          const std::vector<RowMasks> masks = s.constraints->prepare(constraint.empty() ? nullptr : constraint.front(), batch);
          sample_all(batch, logits, masks, result, paths);
          if (drafted) truncate_drafts(batch, result, paths, s.init.kvcache());
          if (caches_prefixes(s.init.kvcache())) {
            publish_step(batch, result, paths, s.init.kvcache(), s.init.engine);
            s.connectors->save_step(s.init.plugins, s.init.kvcache(), batch);  // the blocks read now, stored later
          }
          result.kv = kv_state(s.init.kvcache());
          result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        } catch (const KvExhausted& e) {
          result.error = e.what();
          result.status = TH_ERR_RESOURCE_EXHAUSTED;
          result.kv = kv_state_after_failure(s.init.kvcache());
        } catch (const PluginFault& e) {
          result.error = e.what();
          result.status = TH_ERR_INTERNAL;
          result.fault = e;
          result.kv = kv_state_after_failure(s.init.kvcache());
        } catch (const std::exception& e) {
          result.error = e.what();
          result.status = TH_ERR_INTERNAL;
          result.kv = kv_state_after_failure(s.init.kvcache());
        }
        ++s.steps;
        return result;
      },
      [=](free_atom, uint64_t seq_id) -> KvState {
        auto& kv = self->state.init.kvcache();
        self->state.constraints->release(seq_id);
        try {
          // A sequence whose load is out keeps its blocks until the load's completion (kv_poll).
          if (self->state.connectors->release(self->state.init.plugins, seq_id))
            kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), seq_id);
        } catch (const PluginFault&) {
          // Logged; the sequence is gone either way (its blocks may be lost to the pool).
        }
        return kv_state(kv);
      },
      [=](lookup_atom, uint64_t seq_id, uint64_t salt, const std::vector<int32_t>& prompt) -> LookupResult {
        auto& kv = self->state.init.kvcache();
        LookupResult r;
        if (!caches_prefixes(kv)) r.error = kv.id() + " caches no prefixes";
        else try {
            r.n_cached = lookup_prefix(kv, seq_id, salt, prompt.data(), uint32_t(prompt.size()), r.error);
          } catch (const PluginFault& e) {
            r.error = e.what();
          }
        if (r.error.empty()) try {
            r.loading = self->state.connectors->start_load(self->state.init.plugins, kv, seq_id, salt, prompt, r.n_cached);
          } catch (const PluginFault& e) {
            r.error = e.what();
            r.fault = e;
          }
        r.kv = kv_state(kv);
        return r;
      },
      [=](flush_atom) -> KvState {
        auto& kv = self->state.init.kvcache();
        try {
          if (caches_prefixes(kv)) kv.call(&th_kvcache_vtable::cache_flush, "cache_flush", kv.handle());
        } catch (const PluginFault&) {
          // Logged; the admin's flush answers with the pool as it is.
        }
        return kv_state(kv);
      },
      [=](slide_atom, uint64_t seq_id, uint32_t first_block, uint32_t n_blocks, uint32_t n_positions) -> SlideResult {
        auto& s = self->state.init;
        const UseComputePool partition(s.pool.get());  // the keys' re-rotation computes there too
        SlideResult r;
        try {
          slide_window(s, seq_id, first_block, n_blocks, n_positions);
        } catch (const KvExhausted& e) {
          r.error = e.what();
          r.status = TH_ERR_RESOURCE_EXHAUSTED;
        } catch (const PluginFault& e) {
          r.error = e.what();
          r.status = TH_ERR_INTERNAL;
          r.fault = e;
        } catch (const std::exception& e) {
          r.error = e.what();
          r.status = TH_ERR_INTERNAL;
        }
        r.kv = kv_state_after_failure(s.kvcache());
        return r;
      },
      [=](status_atom) -> KvState { return kv_state(self->state.init.kvcache()); },
      [=](kv_poll_atom) -> KvPollResult {
        auto& s = self->state;
        KvPollResult r;
        try {
          rethrow_receive_fault(s);
          r.loads = s.connectors->poll(s.init.plugins, s.init.kvcache());
        } catch (const PluginFault& e) {
          r.fault = e;  // the engine stops for it; its loads' blocks go with the rebuilt worker's pool
        }
        r.loads_out = uint32_t(s.connectors->loading());
        r.saving = s.connectors->saving();
        r.kv = kv_state_after_failure(s.init.kvcache());
        return r;
      },
      [=](kv_peer_atom, const std::string& from, const std::string& plugin, std::string& bytes) {
        deliver_peer_message(self->state, from, plugin, bytes);
        if (self->state.init.post) self->state.init.post->recycle(std::move(bytes));  // the next message's memory
      },
      [=](swap_atom, SlotSwap swap) -> SwapResult {
        auto& s = self->state.init;
        const std::string name = swap.slot.name();
        if (swap.slot.info().owner != SlotOwner::worker) return {false, "the worker has no slot '" + name + "'"};
        if (swap.slot.info().stacks) return change_layer(self->state, std::move(swap));
        const PluginInstance* current = s.plugins.get(swap.slot);
        if (current == nullptr) return {false, "engine " + s.engine + " serves a dense model: it has no " + name + " slot"};
        if (!swap.instance) return {false, "the " + name + " slot cannot be empty"};
        if (swap.slot.info().swap == SwapMode::new_engine && kv_seqs(s.kvcache()) > 0) {
          return {false, "the kvcache of engine " + s.engine + " holds " + std::to_string(kv_seqs(s.kvcache())) +
                             " sequences: a KV layout change needs the engine drained first"};
        }
        const std::string old = current->id() + " " + current->version();
        const std::string now = swap.instance->id() + " " + swap.instance->version();
        // The old instance is released here, between steps: no step is using it any more.
        s.plugins.set(swap.slot, std::move(swap.instance));
        self->state.swaps.applied(name, swap.requested_ns, swap.engine_idle);
        spdlog::info("engine {}: {} swapped {} -> {}", s.engine, name, old, now);
        return {true, name + ": " + old + " -> " + now};
      },
      [=](status_atom, const std::string&) -> StatusJson {
        auto& s = self->state;
        auto kv = kv_state(s.init.kvcache());
        const th_kv_layout* layout = kv_layout(s.init.kvcache());
        nlohmann::json j = {{"steps", s.steps},
                            {"kv", {{"total_blocks", kv.total_blocks}, {"free_blocks", kv.uncached_free_blocks()},
                                    {"block_size", kv.block_size},
                                    {"dtype", layout != nullptr ? quant::dtype_name(layout->dtype) : "unknown"},
                                    {"prefix_caching", caches_prefixes(s.init.kvcache())}}}};
        if (caches_prefixes(s.init.kvcache())) {
          j["kv"]["cached_blocks"] = kv.cached_blocks;
          j["kv"]["evicted_blocks"] = kv.evicted_blocks;
          j["kv"]["published_blocks"] = kv.published_blocks;
        }
        for (SlotId slot : slots_owned_by(SlotOwner::worker))  // each filled slot the worker owns, under its name
          if (const PluginInstance* p = s.init.plugins.get(slot); p != nullptr && !slot.info().stacks) j[slot.name()] = plugin_json(p);
        if (!s.init.plugins.stack(slot_of(TH_KIND_KV_CONNECTOR)).empty()) {
          j["kv_connectors"] = s.connectors->status(s.init.plugins);
          if (!s.connectors->active(s.init.plugins))
            j["kv_connectors"]["idle"] = s.init.kvcache().id() + " has no prefix caching with seq_truncate: the connectors are not used";
        }
        if (s.expert_load) j["expert_load"] = expert_load_json(*s.expert_load);
        if (s.expert_balance) j["expert_parallel"] = s.expert_balance->status();
        j["last_worker_swap"] = s.swaps.last();
        return {api::dump_json(j)};
      },
  };
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, WorkerInit init) {
  return sys.spawn<caf::detached>(worker, std::move(init));
}

}  // namespace tokenhost
