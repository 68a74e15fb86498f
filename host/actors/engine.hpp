// The engine actor: one model on one device with one set of plugins. It keeps the waiting, running
// and preempted sequences, asks its scheduler plugin each step which run and how many prompt tokens
// each prefills, sends the step to its worker and delivers each request's tokens when it finishes.
#pragma once

#include <memory>
#include <string>

#include "actors/messages.hpp"
#include "metrics/metrics.hpp"
#include "runtime/draft_controller.hpp"
#include "runtime/draft_limits.hpp"

namespace tokenhost {

class DraftSessions;

struct EngineInit {
  std::string name;
  std::string model;
  uint32_t context_len = 512;
  uint32_t vocab_size = 256;
  int32_t eos = -1;  // end-of-sequence token: generating it finishes the request ("stop"); -1: none
  uint32_t max_step_tokens = 512;
  uint32_t max_step_seqs = 64;
  std::shared_ptr<PluginInstance> scheduler;
  std::shared_ptr<PluginInstance> spec_decode;  // may be NULL
  uint32_t max_draft = kDefaultMaxDraft;         // the engine's bound on a sequence's draft
  DraftPolicy draft_policy = DraftPolicy::adaptive;
  // Why this engine cannot speculate whatever its spec_decode slot holds (its kvcache plugin cannot
  // roll back rejected drafts), or "" when it can.
  std::string no_speculation;
  // Its kvcache plugin caches prefixes (th_kvcache.h, ABI 1.5): each request looks its prompt up when
  // it arrives.
  bool prefix_cache = false;
  // What its prefix cache holds, for cache-aware routing (shared with the router, which reads it); NULL
  // when it keeps none. The engine adds the blocks its sequences publish and drops those evicted.
  std::shared_ptr<PrefixSummary> prefix_summary;
  worker_actor worker;
  metrics::Registry* metrics = nullptr;
  // The engine's draft sessions (runtime/draft_sessions.hpp), for its admin status; may be NULL.
  std::shared_ptr<DraftSessions> drafts;
  uint64_t kvcache_swap_requested_ns = 0;  // it replaces an engine for a kvcache swap asked for then
};

engine_actor spawn_engine(caf::actor_system& sys, EngineInit init);

}  // namespace tokenhost
