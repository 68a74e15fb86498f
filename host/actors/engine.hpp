// The engine actor: one model on one device with one set of plugins. It keeps the waiting, running
// and preempted sequences, asks its scheduler plugin each step which run and how many prompt tokens
// each prefills, sends the step to its worker and delivers each request's tokens when it finishes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "actors/engine_vitals.hpp"
#include "actors/messages.hpp"
#include "metrics/metrics.hpp"
#include "speculation/draft_controller.hpp"
#include "speculation/draft_limits.hpp"

namespace tokenhost {

class DraftSessions;

// Attention sinks with a sliding window (StreamingLLM) as an engine runs them, in cache positions: a
// sequence's cache holds its first `sinks` positions (whole blocks) and at most `cap` positions in
// all; after a step that leaves it more than cap - slide, its oldest window blocks go (at least
// `slide` positions at once, so that each key is re-rotated a few times, not once a block).
struct SlidingWindow {
  uint32_t sinks = 0, cap = 0, slide = 0;
  bool on() const { return cap > 0; }
  // The blocks a sequence holding `positions` releases after a step, from block sinks / block_size:
  // none while it holds cap - slide or fewer.
  uint32_t blocks_to_release(uint32_t positions, uint32_t block_size) const {
    if (!on() || positions <= cap - slide) return 0;
    return (positions - (cap - slide) + block_size - 1) / block_size;
  }
};
// The window of an engine whose manifest asks sinks and window positions, on a kvcache of blocks of
// block_size and total_blocks, for a model trained at context_len: sinks rounded up to whole blocks,
// slide a quarter of the window in whole blocks (one at least). Throws std::invalid_argument saying
// what does not fit: a window under two blocks, sinks + window past the context, a pool that cannot
// hold one whole window.
SlidingWindow plan_sliding_window(uint32_t sinks, uint32_t window, uint32_t block_size, uint32_t total_blocks, uint32_t context_len);

struct EngineInit {
  std::string name;
  std::string model;
  uint32_t context_len = 512;
  uint32_t vocab_size = 256;
  int32_t eos = -1;  // end-of-sequence token: generating it finishes the request ("stop"); -1: none
  uint32_t max_step_tokens = 512;
  uint32_t max_step_seqs = 64;
  SlotInstances plugins;  // the slots the engine owns (slot table): scheduler, spec_decode (may be empty)
  PluginInstance& scheduler() const { return *plugins.get(slot_of(TH_KIND_SCHEDULER)); }
  PluginInstance* spec_decode() const { return plugins.get(slot_of(TH_KIND_SPEC_DECODE)); }
  uint32_t max_draft = kDefaultMaxDraft;         // the engine's bound on a sequence's draft
  DraftPolicy draft_policy = DraftPolicy::adaptive;
  // Why this engine cannot speculate whatever its spec_decode slot holds (its kvcache plugin cannot
  // roll back rejected drafts), or "" when it can.
  std::string no_speculation;
  // Its kvcache plugin caches prefixes (th_kvcache.h, ABI 1.5): each request looks its prompt up when
  // it arrives.
  bool prefix_cache = false;
  // Its worker has KV connectors (th_kv_connector.h): a prompt may wait for its blocks (TH_SEQ_LOADING),
  // and the engine asks the worker for finished transfers after each step and while a load is out.
  bool kv_connectors = false;
  // What its prefix cache holds, for cache-aware routing (shared with the router, which reads it); NULL
  // when it keeps none. The engine adds the blocks its sequences publish and drops those evicted.
  std::shared_ptr<PrefixSummary> prefix_summary;
  worker_actor worker;
  // The KV pool as the worker reported it before the engine started (the server asks it first): the
  // engine schedules, looks up and admits behind shared prefixes with it from its first request. Unset:
  // the engine asks the worker as it starts, and schedules nothing until the answer.
  std::optional<KvState> kv;
  metrics::Registry* metrics = nullptr;
  // The engine's draft sessions (speculation/draft_sessions.hpp), for its admin status; may be NULL.
  std::shared_ptr<DraftSessions> drafts;
  uint64_t kvcache_swap_requested_ns = 0;  // it replaces an engine for a kvcache swap asked for then
  // Attention sinks with a sliding window; off by default. With it on, requests are not bounded by
  // context_len, and the kvcache plugin has seq_drop_blocks (the server checks).
  SlidingWindow window;
  // Where the engine notes its steps and the plugin fault that ends it (engine_vitals.hpp); may be NULL.
  std::shared_ptr<EngineVitals> vitals;
};

engine_actor spawn_engine(caf::actor_system& sys, EngineInit init);

}  // namespace tokenhost
