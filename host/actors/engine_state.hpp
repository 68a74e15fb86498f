// The engine actor's state and the parts of its work that need no actor: its metrics
// (engine_metrics.cpp), and each step's decision, the scheduler's and the proposer's, with the checks of
// what they return (engine_decide.cpp). engine.cpp is the actor: messages, steps, results.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "actors/engine.hpp"
#include "actors/swap_latency.hpp"
#include "base/step.hpp"
#include "speculation/drafter.hpp"

namespace tokenhost::engine_detail {

inline uint64_t now_ns() { return steady_now_ns(); }

// The longest a disaggregated request's first stage waits for its prompt's blocks to be stored.
constexpr uint64_t kKvHandoffWaitNs = 2'000'000'000;

struct Sequence {
  GenerateRequest request;
  std::shared_ptr<SequenceContext> context;  // tokens (prompt, then generated) and sampler
  uint32_t prefilled = 0;       // tokens computed into the KV cache
  // Sliding window: of those, the positions the window released; the cache holds kv_positions().
  uint32_t dropped = 0;
  uint32_t kv_positions() const { return prefilled - dropped; }
  uint32_t generated = 0;
  th_seq_state state = TH_SEQ_WAITING;
  uint64_t arrival_ns = 0, last_token_ns = 0;
  uint64_t first_token_ns = 0;  // 0 until the first token
  uint64_t first_step = 0;      // the engine's step count when it arrived, counting one in flight
  std::vector<SampledToken> logprobs;  // when the request asked for them
  std::vector<SampledToken> prompt_logprobs;  // request.prompt_logprobs: one per prompt token after the first
  caf::typed_response_promise<GenerateResult> promise;
  std::vector<int32_t>& tokens() { return context->tokens; }
  const std::vector<int32_t>& tokens() const { return context->tokens; }
  // Tokens the scheduler must prefill before the sequence decodes (see th_sched_seq.prompt_len).
  uint32_t prompt_len() const { return generated == 0 ? uint32_t(tokens().size()) : uint32_t(tokens().size()) - 1; }
  bool cancel_requested = false;
  // Prefix caching: the worker looks its prompt up (the sequence is not scheduled until the answer);
  // the kvcache knows the sequence (a lookup made it: it must be freed even holding no block); the
  // prompt positions the lookup found (th_sched_state.seq_cached; 0 once preempted).
  bool lookup_pending = false;
  bool in_kvcache = false;
  // A KV connector is writing part of its prompt into blocks it holds (TH_SEQ_LOADING): prefilled counts
  // those positions already; it may not run until the worker reports the load done (kv_poll).
  bool loading = false;
  uint32_t cached = 0;
  uint64_t published_at_lookup = 0;  // the kvcache's published blocks when its lookup answered
  // Admission behind a shared prefix (engine_prefix_wait.cpp): a prompt that shares whole blocks with
  // the prompt another sequence of its priority or higher has yet to compute waits for that sequence,
  // its leader, to compute them (not looked up, not shown to the scheduler), then looks up and adopts
  // them. 0: none.
  uint64_t prefix_leader = 0;
  uint32_t prefix_shared = 0;  // the shared positions it waits for: whole blocks
  uint64_t cache_ns = 0;  // its prefix cache namespace (cache_namespace(): API key and cache_salt)
  // Cache-aware routing: the keys of the whole blocks it holds, as the engine's prefix summary knows
  // them (runtime/prefix_summary.hpp); empty when the engine keeps no summary.
  std::vector<uint64_t> block_keys;
  bool cancelled() const { return cancel_requested || (request.stream && request.stream->cancelled()); }
};

struct EngineMetrics {
  metrics::Family* tokens_out = nullptr;
  metrics::Family* tokens_in = nullptr;
  metrics::Family* requests = nullptr;
  metrics::Family* step_seconds = nullptr;
  metrics::Family* step_compute_seconds = nullptr;
  metrics::Family* step_tokens = nullptr;
  metrics::Family* running = nullptr;
  metrics::Family* waiting = nullptr;
  metrics::Family* kv_free = nullptr;
  metrics::Family* preemptions = nullptr;
  metrics::Family* kv_used = nullptr;
  metrics::Family* ttft = nullptr;
  metrics::Family* ttft_steps = nullptr;
  metrics::Family* itl = nullptr;
  metrics::Family* e2e = nullptr;
  metrics::Family* scheduler_seconds = nullptr;
  metrics::Family* draft_tokens = nullptr;
  metrics::Family* accepted_tokens = nullptr;
  metrics::Family* accepted_length = nullptr;
  metrics::Family* spec_step_seconds = nullptr;
  metrics::Family* prefix_lookups = nullptr;
  metrics::Family* prefix_hits = nullptr;
  metrics::Family* prefix_cached_tokens = nullptr;
  metrics::Family* kv_cached = nullptr;
};

struct EngineState {
  EngineInit init;
  std::vector<Sequence> seqs;  // arrival order
  KvState kv;
  bool step_in_flight = false;
  bool draining = false;
  bool retiring = false;  // replaced or removed: finishing what it has, then stopping
  SwapLatency swaps;  // scheduler and spec_decode swaps (the worker keeps its own)
  bool kv_known = false;  // the KV pool's size is known (EngineInit::kv, or the worker's answer): scheduling may start
  uint64_t steps = 0, tokens_out = 0, preemptions = 0;
  // Speculative decoding since the engine started: drafts verified, their tokens, those accepted.
  uint64_t spec_drafts = 0, spec_drafted = 0, spec_accepted = 0, spec_propose_failures = 0;
  // How many offered draft tokens each step verifies (init.draft_policy), from what steps showed.
  DraftController draft_control;
  // Makes every call into the spec_decode plugin on a thread of its own (spawned at the first one).
  drafter_actor drafter;
  // After each step: the blocks the sequences' positions need by the engine's count, the blocks the
  // kvcache plugin reports in use, and how many steps the two disagreed (rolled-back drafts not given
  // back, a plugin's accounting off): the scheduler plans with the plugin's count.
  uint32_t kv_planned = 0, kv_reported = 0;
  uint64_t kv_disagreements = 0;
  uint32_t frees_in_flight = 0;  // free requests sent to the worker and not answered yet
  // Blocks those requests give back, as the engine counted them (blocks_for a sequence's positions, a
  // slide's blocks): a step computing when they were sent reports them still held.
  uint32_t kv_releasing = 0;
  bool kv_poll_in_flight = false;  // a kv_poll sent to the worker and not answered yet
  uint64_t polled_at_step = 0;     // the step count at the last kv_poll
  uint64_t next_load_poll_ns = 0;  // while a load or save is out and no step runs: the next kv_poll not before
  uint32_t worker_loads_out = 0;   // the worker's loads out at the last kv_poll (plus those started since)
  bool worker_saves_out = false;   // the worker had saves out at the last kv_poll: polled until they report
  // Disaggregation's first stages done (GenerateRequest::kv_handoff), answered once the worker has no
  // save of theirs out, or at their deadline.
  struct Handoff {
    caf::typed_response_promise<GenerateResult> promise;
    GenerateResult result;
    uint64_t deadline_ns = 0;
  };
  std::map<uint64_t, Handoff> handoffs;
  // Prefix caching since the engine started: prompts looked up, those that found a cached prefix, the
  // prompt tokens served from the cache, lookups that failed.
  uint64_t prefix_lookups = 0, prefix_hits = 0, prefix_cached_tokens = 0, prefix_failures = 0;
  uint64_t prefix_waits = 0;  // sequences that waited for a leader's prefix (Sequence::prefix_leader)
  // Sliding window since the engine started: slides sent to the worker and the positions they released.
  uint64_t window_slides = 0, window_released = 0;
  uint64_t summary_evictions = 0;  // the kvcache's evicted_blocks the prefix summary has dropped keys for
  // The scheduler's client numbers (th_sched_state.seq_clients): one per client while it has
  // sequences here, never reused.
  std::map<std::string, uint32_t> client_numbers;
  uint32_t next_client_number = 0;
  EngineMetrics m;
  static inline const char* name = "tokenhost.engine";
};

inline uint32_t blocks_for(uint32_t positions, uint32_t block_size) {
  return block_size == 0 ? 0 : (positions + block_size - 1) / block_size;
}

inline Sequence* find(EngineState& s, uint64_t id) {
  for (auto& q : s.seqs)
    if (q.request.id == id) return &q;
  return nullptr;
}

// Whether the engine speculates: a proposer in its spec_decode slot, and a kvcache that can roll drafts
// back (EngineInit::no_speculation empty).
inline bool speculating(const EngineState& s) { return s.init.spec_decode() != nullptr && s.init.no_speculation.empty(); }

// engine_metrics.cpp: the engine's metric families, and its gauges set from its state.
void register_metrics(EngineState& s);
void update_gauges(EngineState& s);
// A finished decode step's rows and worker seconds (every item one token and its draft: prefill
// chunks cost a row far less, and drafts are chosen for decode steps), for the draft controller's cost
// model and the step cost gauges (an engine that speculates only).
void observe_step_cost(EngineState& s, uint32_t rows, double seconds, bool drafted);
// The draft controller's state for the admin status: policy, pooled acceptance, step cost model.
nlohmann::json controller_json(const EngineState& s);

// engine_decide.cpp.
// The positions a sequence's cache may grow to: the window's cap, or the model's context.
inline uint32_t kv_limit(const EngineState& s) { return s.init.window.on() ? s.init.window.cap : s.init.context_len; }
// Sequence q as its scheduler sees it (th_sched_seq); with a sliding window, in cache positions
// (th_scheduler.h).
th_sched_seq sched_view(const EngineState& s, const Sequence& q);
// Speculative decoding: the draft tokens the engine would verify with sequence q in the next step (the
// scheduler's th_sched_state.seq_draft): for a sequence that decodes a token after its first, within its
// request's max_draft, the engine's limit and the context; 0 when the engine cannot speculate.
uint32_t draft_bound(const EngineState& s, const Sequence& q);
// What to ask the proposer for the step's items: each within the scheduler's grant (grants, parallel to
// the items: a 1.4 scheduler's run_draft), or, for a scheduler that grants none itself, within
// draft_bound() and the budget the step has left, then as much as the draft controller finds worth it.
// nullopt when nothing is worth asking (the step runs as it is). The drafter actor proposes
// (speculation/drafter.hpp); take_drafts() keeps what pays of its answer.
std::optional<DraftJob> plan_drafts(EngineState& s, const StepBatch& batch, const std::vector<uint32_t>* grants);
// The proposer's answer to plan_drafts(): the controller observes its cost and cuts each draft to what
// pays; the batch, drafts included, is what the worker runs.
void take_drafts(EngineState& s, DraftReply& reply);
// A spec_decode plugin the engine cannot use says so in the log (at start and when swapped in).
void warn_no_speculation(const EngineState& s);
// Whether the engine's scheduler grants draft tokens itself (built against ABI 1.4 or later).
bool sched_grants_drafts(const EngineState& s);
// Asks the scheduler plugin for a decision and checks it. Returns what the checks refused (or the
// error status schedule() returned), or ""; a throw from the plugin comes out as PluginFault. grants: the
// draft tokens the scheduler granted each run entry (ABI 1.4 run_draft), cleared when the scheduler was
// built against an older minor and grants none itself.
std::string decide(EngineState& s, std::vector<th_sched_item>& run, std::vector<uint64_t>& preempt_ids,
                   std::vector<uint32_t>& grants);
// Every block the kvcache reports in use after a step holds positions of the engine's sequences: the
// frees sent before the step have landed, and none is sent while a step is in flight. A disagreement is
// logged (the first, then each 100th) and counted in the admin status.
void check_kv_accounting(EngineState& s, const KvState& kv);

// Admission behind a shared prefix (engine_prefix_wait.cpp). On arrival with prefix caching on: whether
// sequence q waits for a leader, recorded in q.prefix_leader and q.prefix_shared (then it is not looked
// up yet). Before each decision: the ids of the waiting sequences whose leaders have computed what they
// wait for, or stopped computing their prompts (finished, preempted, generating, cancelled); they wait
// no more and are to be looked up. With all = true, every waiting sequence's id (a step that runs
// nothing must not leave them waiting on a leader that does not run).
bool wait_for_prefix(EngineState& s, Sequence& q);
std::vector<uint64_t> prefix_waits_over(EngineState& s, bool all = false);

}  // namespace tokenhost::engine_detail
