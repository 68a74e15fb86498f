#include "actors/engine.hpp"

#include "actors/engine_state.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/plugin_json.hpp"
#include "actors/swap_latency.hpp"
#include "actors/token_stream.hpp"
#include "actors/plugin_seconds.hpp"
#include "api/api_error.hpp"
#include "speculation/drafts.hpp"
#include "plugin/kind.hpp"
#include "speculation/draft_sessions.hpp"
#include "runtime/prefix_summary.hpp"

namespace tokenhost {
namespace {

using namespace engine_detail;

using self_ptr = engine_actor::stateful_pointer<EngineState>;

void tick(self_ptr self);
void send_step(self_ptr self, StepBatch batch);
void drop_faulted_proposer(self_ptr self, DraftReply& r);

// The engine's drafter (speculation/drafter.hpp), spawned at its first call; it ends with the engine.
drafter_actor drafter_of(self_ptr self) {
  auto& d = self->state.drafter;
  if (!d) {
    d = spawn_drafter(self->system());
    self->attach_functor([d] { caf::anon_send_exit(d, caf::exit_reason::user_shutdown); });
  }
  return d;
}

// Whether q fills the engine's whole KV pool: alone, it could not go on (its next position has no block
// even with every other sequence preempted, and preempting it would only recompute the same positions).
// A sliding window's cache never holds more than its cap.
// A prompt longer than the pool is not this: it is refused by name when nothing can run (tick()).
bool past_pool(const EngineState& s, const Sequence& q) {
  return !s.init.window.on() && q.generated > 0 && s.kv.total_blocks > 0 &&
         q.tokens().size() >= uint64_t(s.kv.total_blocks) * s.kv.block_size;
}

// Why q can never run here (its prompt, or recomputed its prompt and tokens so far, needs more blocks
// than the engine's whole pool), or "".
std::string unfit(const EngineState& s, const Sequence& q) {
  const uint32_t need = blocks_for(std::min(q.prompt_len(), kv_limit(s)), s.kv.block_size);
  if (s.kv.total_blocks == 0 || need <= s.kv.total_blocks) return "";
  return "the request needs " + std::to_string(need) + " KV blocks of " + std::to_string(s.kv.block_size) + " positions for " +
         std::to_string(q.prompt_len()) + " tokens; engine " + s.init.name + " has " + std::to_string(s.kv.total_blocks);
}

// Whether q has reached its context (its last request-length stop): its model's, or the pool's when
// that is smaller.
bool past_context(const EngineState& s, const Sequence& q) {
  return (!s.init.window.on() && q.tokens().size() >= s.init.context_len) || past_pool(s, q);
}

// Cache-aware routing: the whole blocks q holds go into the engine's prefix summary, those it computed
// as the kvcache publishes them, those its lookup found touched. A sequence the kvcache did not make by
// seq_lookup (a preempted one, recomputed through seq_reserve) is not published: nor summarized.
void summarize_blocks(EngineState& s, Sequence& q) {
  PrefixSummary* summary = s.init.prefix_summary.get();
  if (summary == nullptr || !q.in_kvcache || q.dropped > 0) return;  // a window slid: no prefix any more
  const size_t had = q.block_keys.size();
  extend_prefix_block_keys(q.cache_ns, q.tokens(), q.prefilled, summary->block_size(), q.block_keys);
  if (q.block_keys.size() > had) summary->add(q.block_keys.data() + had, q.block_keys.size() - had);
}

// q lets go of its blocks: the kvcache's least-recently-used order starts counting them now.
void unsummarize_blocks(EngineState& s, Sequence& q) {
  if (PrefixSummary* summary = s.init.prefix_summary.get()) summary->touch(q.block_keys);
  q.block_keys.clear();
}

// Gives back what the kvcache holds of seq (its blocks; a lookup's record), if anything. The worker
// handles messages in order: a free sent after a lookup or a step lands after it.
void release_kv(self_ptr self, Sequence& seq) {
  auto& s = self->state;
  unsummarize_blocks(s, seq);
  if (seq.prefilled == 0 && seq.state != TH_SEQ_RUNNING && !seq.in_kvcache) return;
  ++s.frees_in_flight;
  const uint32_t held = blocks_for(seq.kv_positions(), s.kv.block_size);
  s.kv_releasing += held;
  self->request(s.init.worker, caf::infinite, free_atom::value, seq.request.id).then([self, held](const KvState& kv) {
    self->state.kv = kv;
    self->state.kv_releasing -= held;
    update_gauges(self->state);
    if (--self->state.frees_in_flight == 0) tick(self);
  });
}

void finish(self_ptr self, size_t index, const std::string& reason, const std::string& error = {}) {
  auto& s = self->state;
  Sequence seq = std::move(s.seqs[index]);
  s.seqs.erase(s.seqs.begin() + long(index));
  release_kv(self, seq);
  GenerateResult r;
  r.tokens.assign(seq.tokens().begin() + long(seq.request.prompt.size()), seq.tokens().end());
  r.finish_reason = reason;
  r.engine = s.init.name;
  r.error = error;
  r.logprobs = std::move(seq.logprobs);
  r.prompt_logprobs = std::move(seq.prompt_logprobs);
  if (seq.first_token_ns != 0) r.ttft_s = double(seq.first_token_ns - seq.arrival_ns) * 1e-9;
  if (seq.generated >= 2) r.itl_s = double(seq.last_token_ns - seq.first_token_ns) * 1e-9 / double(seq.generated - 1);
  if (reason == "length" || reason == "stop") r.e2e_s = double(now_ns() - seq.arrival_ns) * 1e-9;
  if (s.m.requests) s.m.requests->add({s.init.name, reason}, 1);
  if (s.m.e2e && reason != "error") s.m.e2e->observe({s.init.name}, double(now_ns() - seq.arrival_ns) * 1e-9);
  if (const PluginInstance* spec = s.init.spec_decode(); spec && spec->fn(&th_spec_decode_vtable::seq_end))
    self->send(drafter_of(self), seq_end_atom::value, DraftNotice{s.init.plugins.stack(slot_of(TH_KIND_SPEC_DECODE)).front(), seq.request.id});
  s.draft_control.forget(seq.request.id);
  if (seq.request.kv_handoff && s.init.kv_connectors && reason == "length") {
    // The decode engine is to load the prompt's blocks: answered once they are stored (poll_kv_connectors).
    s.handoffs[seq.request.id] = {std::move(seq.promise), std::move(r), now_ns() + kKvHandoffWaitNs};
    return;
  }
  seq.promise.deliver(std::move(r));
}

void preempt(self_ptr self, Sequence& seq) {
  auto& s = self->state;
  // The blocks it holds now, counted free until the worker's reply says exactly: the scheduler may
  // decide the next step before that reply, so this must not count more than will be freed.
  const uint32_t held = blocks_for(seq.kv_positions(), s.kv.block_size);
  seq.state = TH_SEQ_PREEMPTED;
  unsummarize_blocks(s, seq);
  seq.prefilled = seq.dropped = 0;
  seq.cached = 0;  // recomputed through seq_reserve: no longer in the prefix cache's records
  seq.in_kvcache = false;
  ++s.preemptions;
  if (s.m.preemptions) s.m.preemptions->add({s.init.name}, 1);
  // The worker handles messages in order: this free lands before the next step.
  ++s.frees_in_flight;
  s.kv_releasing += held;
  self->request(s.init.worker, caf::infinite, free_atom::value, seq.request.id).then([self, held](const KvState& kv) {
    self->state.kv = kv;
    self->state.kv_releasing -= held;
    if (--self->state.frees_in_flight == 0) tick(self);
  });
  s.kv.free_blocks = std::min(s.kv.total_blocks, s.kv.free_blocks + held);
}

void fail_all(self_ptr self, const std::string& error) {
  while (!self->state.seqs.empty()) finish(self, 0, "error", error);
}

// First stages of disaggregated requests still waiting for their blocks to be stored: answered now (the
// engine stops; the decode engine computes what it does not find).
void answer_handoffs(self_ptr self) {
  for (auto& [id, h] : self->state.handoffs) h.promise.deliver(std::move(h.result));
  self->state.handoffs.clear();
}

// A plugin broke a rule the engine cannot go on past: it threw across the ABI, or a required call
// failed or returned what the host's checks refuse. Its state (and the KV pool's) is unknown, so the
// engine fails its requests with the fault, stops its worker and stops, the fault noted for the server,
// which rebuilds the engine with fresh instances (server/engine_supervisor.hpp).
void stop_for_fault(self_ptr self, const PluginFault& f) {
  auto& s = self->state;
  spdlog::error("engine {}: {}; failing {} request(s) and stopping (the server rebuilds it)", s.init.name, f.what(), s.seqs.size());
  if (s.init.vitals) s.init.vitals->note_fault(f);
  s.step_in_flight = false;
  fail_all(self, f.what());
  answer_handoffs(self);
  self->send_exit(s.init.worker, caf::exit_reason::user_shutdown);
  self->quit(caf::exit_reason::unhandled_exception);
}

void on_step_done(self_ptr self, const StepBatch& batch, const StepResult& result);

// Finishes the sequences whose client has gone (or asked to stop). Not while a step is in flight:
// the step may hold them, and their blocks are freed after it.
void drop_cancelled(self_ptr self) {
  auto& s = self->state;
  if (s.step_in_flight) return;
  for (size_t i = 0; i < s.seqs.size();) {
    if (s.seqs[i].cancelled()) finish(self, i, "cancelled");
    else ++i;
  }
}

// Waiting sequences hold the cached prefixes their lookups found (pinned: never evicted). When the
// scheduler runs nothing and no sequence runs, those pins may be what keeps the pool full: they are
// given back (the blocks stay cached, unpinned) and the sequences compute their whole prompts. Returns
// whether any was.
bool release_pinned_prefixes(self_ptr self) {
  auto& s = self->state;
  size_t released = 0;
  for (auto& q : s.seqs) {
    if (q.state != TH_SEQ_WAITING || !q.in_kvcache || q.lookup_pending || q.loading || q.prefilled == 0) continue;
    release_kv(self, q);
    q.prefilled = q.dropped = 0;
    q.cached = 0;
    q.in_kvcache = false;
    ++released;
  }
  if (released > 0)
    spdlog::warn("engine {}: the scheduler runs nothing with no sequence running; {} waiting sequence(s) give back the cached "
                 "prefixes they held and compute their whole prompts", s.init.name, released);
  return released > 0;
}

// Sliding window: a sequence whose cache holds more than the window keeps between steps releases its
// oldest window blocks (the worker drops them and re-rotates the keys after them). Counted with the
// frees in flight: the next decision waits for the pool as it is after it. A slide that fails
// preempts the sequence when the pool lacked blocks (it is recomputed), else ends it with the error.
void slide_window(self_ptr self, Sequence& q) {
  auto& s = self->state;
  const uint32_t bs = s.kv.block_size, held = q.kv_positions();
  const uint32_t n = s.init.window.blocks_to_release(held, bs);
  if (n == 0) return;
  if (q.dropped == 0) unsummarize_blocks(s, q);  // its cache stops being a prefix of its tokens
  q.dropped += n * bs;
  ++s.window_slides;
  s.window_released += n * bs;
  ++s.frees_in_flight;
  s.kv_releasing += n;
  const uint64_t id = q.request.id;
  self->request(s.init.worker, caf::infinite, slide_atom::value, id, s.init.window.sinks / bs, n, held)
      .then([self, id, n](const SlideResult& r) {
        auto& s = self->state;
        s.kv_releasing -= n;
        if (r.fault) return stop_for_fault(self, *r.fault);
        s.kv = r.kv;
        if (!r.error.empty()) {
          for (size_t i = 0; i < s.seqs.size(); ++i) {
            if (s.seqs[i].request.id != id) continue;
            if (r.status == TH_ERR_RESOURCE_EXHAUSTED) {
              spdlog::warn("engine {}: {} could not slide its window ({}); it is recomputed", s.init.name, s.seqs[i].request.label(), r.error);
              preempt(self, s.seqs[i]);
            } else {
              spdlog::error("engine {}: {} could not slide its window: {}", s.init.name, s.seqs[i].request.label(), r.error);
              finish(self, i, "error", r.error);
            }
            break;
          }
        }
        update_gauges(s);
        if (--s.frees_in_flight == 0) tick(self);
      });
}

bool lookups_pending(const EngineState& s) {
  return std::any_of(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.lookup_pending; });
}

// Looks the prompt of the sequence just arrived up in the prefix cache; it is scheduled once the
// worker answers. A lookup that fails leaves the sequence to compute its whole prompt.
//
// The worker answers lookups between steps, in the order they came: one sent while a step computes is
// answered right after that step's result. on_step_done then leaves the next step to the answers (the
// last of them decides it), so that a prompt arriving during a step joins the next one rather than the
// one after: its first token comes 2 steps after it arrived, counting the one computing then, not 3.
void look_up(self_ptr self, Sequence& q) {
  auto& s = self->state;
  q.lookup_pending = true;
  q.in_kvcache = true;  // from now on the worker may hold a record of it: freed with it
  const uint64_t id = q.request.id;
  self->request(s.init.worker, caf::infinite, lookup_atom::value, id, q.cache_ns, q.tokens())
      .then([self, id](const LookupResult& r) {
        auto& s = self->state;
        if (r.fault) return stop_for_fault(self, *r.fault);
        if (s.frees_in_flight == 0) s.kv = r.kv;
        ++s.prefix_lookups;
        if (s.m.prefix_lookups) s.m.prefix_lookups->add({s.init.name}, 1);
        if (!r.error.empty() && s.prefix_failures++ % 100 == 0)
          spdlog::warn("engine {}: prefix lookup of {} failed ({} such): {}", s.init.name,
                       find(s, id) != nullptr ? find(s, id)->request.label() : "sequence " + std::to_string(id), s.prefix_failures, r.error);
        if (r.n_cached > 0) {
          ++s.prefix_hits;
          s.prefix_cached_tokens += r.n_cached;
          if (s.m.prefix_hits) s.m.prefix_hits->add({s.init.name}, 1);
          if (s.m.prefix_cached_tokens) s.m.prefix_cached_tokens->add({s.init.name}, double(r.n_cached));
        }
        if (r.loading > 0) ++s.worker_loads_out;  // polled until it completes, whatever becomes of its sequence
        if (Sequence* q = find(s, id)) {  // else it ended meanwhile: its free follows this lookup
          q->lookup_pending = false;
          q->prefilled = q->cached = r.n_cached + r.loading;
          q->loading = r.loading > 0;  // runs once the load is done (poll_kv_connectors)
          q->published_at_lookup = r.kv.published_blocks;
          if (!q->loading) {
            summarize_blocks(s, *q);
            slide_window(self, *q);  // a cached prefix longer than the window keeps
          }
        }
        update_gauges(s);
        // Other answers right behind this one: the last decides the step, with all of them.
        if (s.step_in_flight || !lookups_pending(s)) tick(self);
      });
}

// Sequences waiting for a leader's prefix whose waits are over (all of them with `all`) are looked up.
// Returns whether any was.
bool end_prefix_waits(self_ptr self, bool all) {
  const std::vector<uint64_t> over = prefix_waits_over(self->state, all);
  for (uint64_t id : over)
    if (Sequence* q = find(self->state, id)) look_up(self, *q);
  return !over.empty();
}

// KV connectors: asks the worker for the transfers finished (a load's sequence then runs from what
// arrived) after each step and, while a load is out, every 2 ms.
void poll_kv_connectors(self_ptr self) {
  auto& s = self->state;
  // A sequence ended while loading keeps its blocks in the worker until its load completes: polled too.
  const bool transfers_out = s.worker_loads_out > 0 || !s.handoffs.empty() || s.worker_saves_out ||
                             std::any_of(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.loading; });
  if (!s.init.kv_connectors || s.kv_poll_in_flight) return;
  if (s.polled_at_step == s.steps && !(transfers_out && now_ns() >= s.next_load_poll_ns)) return;
  s.kv_poll_in_flight = true;
  s.polled_at_step = s.steps;
  self->request(s.init.worker, caf::infinite, kv_poll_atom::value).then([self](const KvPollResult& r) {
    auto& s = self->state;
    s.kv_poll_in_flight = false;
    if (r.fault) return stop_for_fault(self, *r.fault);
    s.worker_loads_out = r.loads_out;
    if (s.frees_in_flight == 0 && !s.step_in_flight) s.kv = r.kv;
    for (auto it = s.handoffs.begin(); it != s.handoffs.end();) {  // first stages whose blocks are stored
      const bool saving = std::find(r.saving.begin(), r.saving.end(), it->first) != r.saving.end();
      if (saving && now_ns() < it->second.deadline_ns) {
        ++it;
        continue;
      }
      if (saving)
        spdlog::warn("engine {}: sequence {}'s prompt blocks were not all stored within {} s; the decode engine computes what it lacks",
                     s.init.name, it->first, kKvHandoffWaitNs / 1'000'000'000);
      it->second.promise.deliver(std::move(it->second.result));
      it = s.handoffs.erase(it);
    }
    for (const KvLoadDone& d : r.loads) {
      Sequence* q = find(s, d.seq_id);
      if (q == nullptr || !q->loading) continue;  // ended meanwhile: the worker freed it
      q->loading = false;
      q->prefilled = q->cached = std::min(q->prefilled, d.positions);
      summarize_blocks(s, *q);
      slide_window(self, *q);
    }
    s.worker_saves_out = !r.saving.empty();
    if (s.worker_loads_out > 0 || !s.handoffs.empty()) {
      s.next_load_poll_ns = now_ns() + 2'000'000;  // not sooner: the ticks in between do not ask again
      self->delayed_send(self, std::chrono::milliseconds(2), tick_atom::value);
    } else if (s.worker_saves_out) {
      // Saves that finish after the last step are reported (counted, their failures seen) without
      // waiting for the next request; nobody waits on them, so less often.
      s.next_load_poll_ns = now_ns() + 10'000'000;
      self->delayed_send(self, std::chrono::milliseconds(10), tick_atom::value);
    }
    update_gauges(s);
    tick(self);
  });
}

void tick(self_ptr self) {
  auto& s = self->state;
  if (!s.kv_known) return;
  poll_kv_connectors(self);
  drop_cancelled(self);
  end_prefix_waits(self, false);  // their leaders have computed the blocks they share
  if (s.step_in_flight || s.seqs.empty()) {
    if ((s.draining || s.retiring) && s.seqs.empty() && !s.step_in_flight) {
      if (s.retiring) spdlog::info("engine {} retired: its last request is done", s.init.name);
      answer_handoffs(self);
      self->send_exit(s.init.worker, caf::exit_reason::user_shutdown);
      self->quit();
    }
    return;
  }
  std::vector<th_sched_item> run;
  std::vector<uint64_t> preempt_ids;
  std::vector<uint32_t> grants;
  if (s.init.vitals) s.init.vitals->step_started(now_ns());  // the deadline counts from the decision
  std::string problem;
  try {
    problem = decide(s, run, preempt_ids, grants);
  } catch (const PluginFault& f) {
    return stop_for_fault(self, f);
  }
  if (!problem.empty()) {
    // An error status, which schedule() may not return, or a decision the checks refuse: the
    // scheduler's state is as untrustworthy as after a throw.
    return stop_for_fault(self, PluginFault("scheduler error: " + problem, s.init.scheduler().call_site("schedule")));
  }
  for (auto id : preempt_ids) {
    // A sequence preempted because its prompt (or, recomputed, its prompt and tokens so far) needs more
    // blocks than the whole pool would be admitted again and preempted again forever: it ends here.
    Sequence& q = *find(s, id);
    if (const std::string why = unfit(s, q); !why.empty()) {
      spdlog::error("engine {}: failing {}: {}", s.init.name, q.request.label(), why);
      finish(self, size_t(&q - s.seqs.data()), "error", why);
      continue;
    }
    preempt(self, q);
  }
  if (run.empty()) {
    if (s.init.vitals) s.init.vitals->step_ended();
    // Blocks on their way back: decide again once the worker has freed them. A prompt being looked up
    // was not shown to the scheduler: decide again when the answer comes.
    if (s.frees_in_flight > 0) return;
    if (std::any_of(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.lookup_pending || q.loading; })) return;
    // Sequences waiting for a leader's prefix while nothing runs: their leaders are not computing it.
    if (end_prefix_waits(self, true)) return;  // decided again when the lookups answer
    // The scheduler waits for resources; with nothing running, nothing will free any: a request that
    // can never fit must not wait forever.
    bool any_running = std::any_of(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.state == TH_SEQ_RUNNING; });
    if (!any_running && release_pinned_prefixes(self)) return;  // decided again once the frees land
    if (!any_running) {
      // The request that cannot fit even in the whole cache, else the oldest.
      size_t victim = 0;
      for (size_t i = 0; i < s.seqs.size(); ++i) {
        if (!unfit(s, s.seqs[i]).empty()) {
          victim = i;
          break;
        }
      }
      std::string why = unfit(s, s.seqs[victim]);
      if (why.empty())
        why = "scheduler " + s.init.scheduler().id() + " ran nothing with the KV cache of engine " + s.init.name + " empty (" +
              std::to_string(s.kv.total_blocks) + " blocks)";
      spdlog::error("engine {}: scheduler {} runs nothing with the KV cache empty; failing {}: {}", s.init.name,
                    s.init.scheduler().id(), s.seqs[victim].request.label(), why);
      finish(self, victim, "error", why);
      self->send(self, tick_atom::value);
    }
    return;
  }
  StepBatch batch;
  for (const auto& item : run) {
    Sequence& q = *find(s, item.seq_id);
    uint32_t pending = uint32_t(q.tokens().size()) - q.prefilled;
    uint32_t n = std::min(item.n_tokens, pending);
    StepItem si;
    si.seq_id = q.request.id;
    si.start = q.kv_positions();
    si.tokens.assign(q.tokens().begin() + q.prefilled, q.tokens().begin() + q.prefilled + n);
    si.sample = q.prefilled + n == q.tokens().size();
    si.context = q.context;
    if (q.request.prompt_logprobs && q.generated == 0) {  // every row's logits: the prompt's log-probabilities
      si.score = true;
      si.logit_rows = n;
      si.score_next = si.sample ? -1 : q.tokens()[q.prefilled + n];
    }
    // A first chunk whose prompt found nothing when it arrived looks again if blocks were published
    // since: requests that arrive together share the prefix the first of them computes.
    if (s.init.prefix_cache && q.in_kvcache && q.prefilled == 0 && q.generated == 0 && s.kv.published_blocks > q.published_at_lookup) {
      si.relookup = true;
      si.cache_salt = q.cache_ns;
    }
    q.state = TH_SEQ_RUNNING;
    batch.items.push_back(std::move(si));
  }
  s.step_in_flight = true;
  // Drafts come from the drafter's thread: a proposer's compute never runs on this actor's.
  std::optional<DraftJob> job = plan_drafts(s, batch, sched_grants_drafts(s) ? &grants : nullptr);
  if (!job) return send_step(self, std::move(batch));
  self->request(drafter_of(self), caf::infinite, propose_atom::value, std::move(*job))
      .then([self](DraftReply& r) {
              if (!r.fault.empty()) drop_faulted_proposer(self, r);
              take_drafts(self->state, r);
              if (r.batch.items.empty()) {  // every sequence of the step ended with the fault
                self->state.step_in_flight = false;
                self->send(self, tick_atom::value);
                return;
              }
              send_step(self, std::move(r.batch));
            },
            [self, batch = std::move(batch)](caf::error& e) mutable {
              spdlog::warn("engine {}: the drafter failed ({}); the step runs without drafts", self->state.init.name,
                           self->system().render(e));
              send_step(self, std::move(batch));
            });
}

// The proposer threw from propose(): the requests it was drafting for end with its fault (they leave
// the step), and the spec_decode slot is emptied, so that the engine goes on decoding without drafts
// until an operator swaps a proposer in (the faulting one may be swapped in again).
void drop_faulted_proposer(self_ptr self, DraftReply& r) {
  auto& s = self->state;
  const PluginInstance* spec = s.init.spec_decode();
  spdlog::error("engine {}: its proposer {} faulted; {} request(s) it was drafting for end with the error, and the spec_decode "
                "slot is emptied (the engine decodes without drafts until a proposer is swapped in)",
                s.init.name, spec ? spec->id() + " " + spec->version() : std::string("(swapped out)"), r.fault_seqs.size());
  s.init.plugins.set(slot_of(TH_KIND_SPEC_DECODE), nullptr);
  s.draft_control.forget_propose_cost();
  for (uint64_t id : r.fault_seqs) {
    auto& items = r.batch.items;
    items.erase(std::remove_if(items.begin(), items.end(), [id](const StepItem& item) { return item.seq_id == id; }), items.end());
    for (size_t i = 0; i < s.seqs.size(); ++i)
      if (s.seqs[i].request.id == id) {
        finish(self, i, "error", r.fault);
        break;
      }
  }
}

// Sends the step to the worker (the engine has marked it in flight) and takes its result.
void send_step(self_ptr self, StepBatch batch) {
  auto& s = self->state;
  s.swaps.step_started();
  auto started = std::chrono::steady_clock::now();
  self->request(s.init.worker, caf::infinite, step_atom::value, batch)
      .then(
          [self, batch, started](const StepResult& r) {
            if (self->state.m.step_seconds)
              self->state.m.step_seconds->observe({self->state.init.name},
                                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
            if (self->state.m.step_compute_seconds && r.error.empty())
              self->state.m.step_compute_seconds->observe({self->state.init.name}, r.seconds);
            if (r.error.empty()) {
              size_t rows = 0;
              bool drafted = false, decode_only = true;
              for (const auto& item : batch.items) {
                rows += item.tokens.size();
                drafted |= item.n_draft > 0;
                decode_only &= item.sample && item.tokens.size() == item.n_draft + 1u;
              }
              if (self->state.m.step_tokens) self->state.m.step_tokens->add({self->state.init.name}, double(rows));
              if (decode_only) observe_step_cost(self->state, uint32_t(rows), r.seconds, drafted);
            }
            on_step_done(self, batch, r);
          },
          [self, batch](caf::error& e) {
            StepResult r;
            r.error = "the worker of engine " + self->state.init.name + " stopped (" + self->system().render(e) + ")";
            r.status = TH_ERR_INTERNAL;
            on_step_done(self, batch, r);
          });
}

void on_step_done(self_ptr self, const StepBatch& batch, const StepResult& result) {
  auto& s = self->state;
  s.step_in_flight = false;
  if (s.init.vitals) s.init.vitals->step_ended();
  ++s.steps;
  // The kvcache evicted blocks in this step (a failed one too) before it published any: the prefix
  // summary drops as many, the least recently used first, as the plugin did.
  if (PrefixSummary* summary = s.init.prefix_summary.get(); summary && result.kv.evicted_blocks > s.summary_evictions) {
    summary->evict_oldest(result.kv.evicted_blocks - s.summary_evictions);
    s.summary_evictions = result.kv.evicted_blocks;
  }
  if (result.fault) return stop_for_fault(self, *result.fault);
  if (!result.error.empty()) {
    if (result.status == TH_ERR_RESOURCE_EXHAUSTED) {
      // The scheduler over-committed the cache: recompute the newest running sequence and go on.
      spdlog::warn("engine {}: the KV cache ran out of blocks: {}", s.init.name, result.error);
      for (auto it = s.seqs.rbegin(); it != s.seqs.rend(); ++it) {
        if (it->state == TH_SEQ_RUNNING) {
          preempt(self, *it);
          break;
        }
      }
      for (const auto& item : batch.items)
        if (Sequence* q = find(s, item.seq_id); q && q->state == TH_SEQ_RUNNING) preempt(self, *q);
    } else {
      spdlog::error("engine {}: step failed: {}", s.init.name, result.error);
      for (const auto& item : batch.items) {
        for (size_t i = 0; i < s.seqs.size(); ++i)
          if (s.seqs[i].request.id == item.seq_id) finish(self, i, "error", result.error);
      }
    }
  } else {
    size_t sampled = 0, sampled_item = 0;
    std::vector<std::pair<uint64_t, std::string>> failed;  // sequences whose item failed alone
    for (size_t i = 0; i < result.reused.size() && i < batch.items.size(); ++i) {
      if (result.reused[i] == 0) continue;  // a relookup found what its arrival's lookup did not
      ++s.prefix_hits;
      s.prefix_cached_tokens += result.reused[i];
      if (s.m.prefix_hits) s.m.prefix_hits->add({s.init.name}, 1);
      if (s.m.prefix_cached_tokens) s.m.prefix_cached_tokens->add({s.init.name}, double(result.reused[i]));
      if (Sequence* q = find(s, batch.items[i].seq_id)) q->cached = result.reused[i];
    }
    for (size_t item_index = 0; item_index < batch.items.size(); ++item_index) {
      const StepItem& item = batch.items[item_index];
      Sequence* q = find(s, item.seq_id);
      const uint32_t accepted = item.sample ? result.accepted.at(sampled_item) : 0;
      const uint32_t drafted = item.sample ? result.drafted.at(sampled_item) : 0;
      const size_t run_begin = sampled;
      const std::string* item_error = item.sample && sampled_item < result.item_errors.size() && !result.item_errors[sampled_item].empty()
                                          ? &result.item_errors[sampled_item] : nullptr;
      if (item.sample) sampled += accepted + 1, ++sampled_item;
      if (q == nullptr || q->state != TH_SEQ_RUNNING) continue;
      // Prompt log-probabilities: row r of the item predicts prompt token prefilled + r + 1.
      if (item_index < result.scores.size() && !result.scores[item_index].empty()) {
        const std::vector<SampledToken>& scores = result.scores[item_index];
        for (size_t r = 0; r < scores.size() && q->prefilled + r < q->prompt_logprobs.size(); ++r)
          q->prompt_logprobs[q->prefilled + r] = scores[r];
      }
      // The KV cache holds the item's own tokens and the draft tokens the target agreed with.
      q->prefilled += uint32_t(item.tokens.size()) - item.n_draft + accepted;
      summarize_blocks(s, *q);
      if (!item.sample) continue;
      if (item_error != nullptr) {  // this sequence alone cannot go on (a constraint that allows nothing)
        spdlog::warn("engine {}: {} fails: {}", s.init.name, q->request.label(), *item_error);
        failed.emplace_back(item.seq_id, *item_error);
        continue;
      }
      if (drafted == 0 && q->generated > 0) s.draft_control.observe_no_draft(item.seq_id);
      if (drafted > 0) {
        s.draft_control.observe_draft(item.seq_id, drafted, accepted);
        const PluginInstance* spec = s.init.spec_decode();
        ++s.spec_drafts;
        s.spec_drafted += drafted;
        s.spec_accepted += accepted;
        if (s.m.draft_tokens && spec) s.m.draft_tokens->add({s.init.name, spec->id()}, drafted);
        if (s.m.accepted_tokens && spec) s.m.accepted_tokens->add({s.init.name, spec->id()}, accepted);
        if (s.m.accepted_length && spec) s.m.accepted_length->observe({s.init.name, spec->id()}, accepted);
        if (spec && spec->fn(&th_spec_decode_vtable::accepted))
          self->send(drafter_of(self), accepted_atom::value,
                     DraftNotice{s.init.plugins.stack(slot_of(TH_KIND_SPEC_DECODE)).front(), item.seq_id, drafted, accepted});
      }
      // Each token of the run as plain decoding would have given it, one at a time: the run stops where
      // the request does (end of sequence, max_tokens, the context), and what follows is dropped.
      for (uint32_t k = 0; k <= accepted; ++k) {
        if (q->generated >= q->request.max_tokens) break;  // max_tokens 0: the prompt scored, nothing generated
        const SampledToken& t = result.sampled.at(run_begin + k);
        q->tokens().push_back(t.token);
        ++q->generated;
        ++s.tokens_out;
        if (s.m.tokens_out) s.m.tokens_out->add({s.init.name}, 1);
        const uint64_t now = now_ns();
        if (q->generated == 1) {
          q->first_token_ns = now;
          if (s.m.ttft) s.m.ttft->observe({s.init.name}, double(now - q->arrival_ns) * 1e-9);
          if (s.m.ttft_steps) s.m.ttft_steps->observe({s.init.name}, double(s.steps - q->first_step));
        } else if (s.m.itl) {
          s.m.itl->observe({s.init.name}, double(now - q->last_token_ns) * 1e-9);
        }
        q->last_token_ns = now;
        if (q->request.logprobs) q->logprobs.push_back(t);
        if (q->request.stream) q->request.stream->push(t);
        if ((t.token == s.init.eos && !q->request.ignore_eos) || q->generated >= q->request.max_tokens || past_context(s, *q))
          break;
      }
    }
    check_kv_accounting(s, result.kv);
    for (const auto& [seq_id, error] : failed)
      for (size_t i = 0; i < s.seqs.size(); ++i)
        if (s.seqs[i].request.id == seq_id) {
          finish(self, i, "error", error);
          break;
        }
    for (size_t i = 0; i < s.seqs.size();) {
      const Sequence& q = s.seqs[i];
      if (q.generated > 0 && q.tokens().back() == s.init.eos && !q.request.ignore_eos) {
        finish(self, i, "stop");
      } else if ((q.generated >= q.request.max_tokens && (q.generated > 0 || q.prefilled >= q.tokens().size())) ||
                 past_context(s, q)) {
        if (q.generated < q.request.max_tokens && past_pool(s, q))
          spdlog::info("engine {}: {} stops at {} of {} tokens: with its prompt it fills the KV pool ({} blocks of {} positions)",
                       s.init.name, q.request.label(), q.generated, q.request.max_tokens, s.kv.total_blocks, s.kv.block_size);
        finish(self, i, "length");
      } else {
        ++i;
      }
    }
    // After the accounting check, which counts the pool as the step left it.
    for (const auto& item : batch.items)
      if (Sequence* q = find(s, item.seq_id); q && q->state == TH_SEQ_RUNNING) slide_window(self, *q);
  }
  // The pool as the step left it (a failed step reports it too). Frees sent since are not in it: until
  // their replies come the free count is low, never high, so a step decided meanwhile (a new request
  // or a cancel ticks the engine) never reserves blocks that are not there.
  s.kv = result.kv;
  update_gauges(s);
  // Lookups sent while the step computed are answered right after its result: their answers decide
  // the next step (look_up), with their prompts in it.
  if (lookups_pending(s)) return;
  if (s.frees_in_flight == 0) {
    tick(self);
    return;
  }
  // Frees are on their way to the worker: ask after them (it handles messages in order).
  self->request(s.init.worker, caf::infinite, status_atom::value).then([self](const KvState& kv) {
    self->state.kv = kv;
    update_gauges(self->state);
    if (!lookups_pending(self->state)) tick(self);
  });
}

engine_actor::behavior_type engine(self_ptr self, EngineInit init) {
  self->state.init = std::move(init);
  // The worker stopping for any reason but the engine's own exit (an exception past every boundary, a
  // kill) leaves the engine nothing to compute with: its requests end naming the engine and why, and it
  // stops with that reason, which the router (watching the engine) sees.
  self->monitor(self->state.init.worker);
  self->set_down_handler([self](caf::down_msg& down) {
    auto& s = self->state;
    if (down.source != s.init.worker.address()) return;
    const std::string why = "the worker of engine " + s.init.name + " stopped (" + self->system().render(down.reason) + ")";
    if (!s.seqs.empty()) spdlog::error("engine {}: {}; failing {} request(s)", s.init.name, why, s.seqs.size());
    s.step_in_flight = false;
    fail_all(self, why);
    self->quit(down.reason ? down.reason : caf::make_error(caf::exit_reason::unknown));
  });
  self->state.draft_control = DraftController(self->state.init.draft_policy);
  register_metrics(self->state);
  warn_no_speculation(self->state);
  self->state.swaps.bind(self->state.init.metrics, self->state.init.name);
  self->state.swaps.applied(slot_of(TH_KIND_KVCACHE).name(), self->state.init.kvcache_swap_requested_ns);
  if (const auto& kv = self->state.init.kv) {
    // Known before any request: one arriving before an answer from the worker would find no block size
    // and neither look its prompt up with the others nor wait behind a shared prefix.
    self->state.kv = *kv;
    self->state.kv_known = true;
    update_gauges(self->state);
  } else {
    self->request(self->state.init.worker, caf::infinite, status_atom::value).then([self](const KvState& kv) {
      self->state.kv = kv;
      self->state.kv_known = true;
      update_gauges(self->state);
      tick(self);
    });
  }
  return {
      [=](generate_atom, GenerateRequest req) -> caf::result<GenerateResult> {
        auto& s = self->state;
        auto fail = [&](std::string why) { return GenerateResult::failed(s.init.name, std::move(why)); };
        if (s.draining) return fail("the server is shutting down");
        if (req.prompt.empty()) return fail("the prompt is empty");
        if (req.max_tokens == 0 && !req.prompt_logprobs) return fail("max_tokens must be at least 1 (0 only to score the prompt)");
        if (!s.init.window.on() && req.prompt.size() + 1 > s.init.context_len)
          return fail("the prompt has " + std::to_string(req.prompt.size()) + " tokens; engine " + s.init.name +
                      " holds at most " + std::to_string(s.init.context_len - 1) + " before generating");
        for (size_t i = 0; i < req.prompt.size(); ++i) {
          if (req.prompt[i] < 0 || uint32_t(req.prompt[i]) >= s.init.vocab_size)
            return fail("prompt token " + std::to_string(req.prompt[i]) + " at position " + std::to_string(i) +
                        " is outside the vocabulary of " + std::to_string(s.init.vocab_size) + " tokens");
        }
        if (find(s, req.id) != nullptr) return fail("request id " + std::to_string(req.id) + " is already in flight");
        Sequence q;
        try {
          q.context = std::make_shared<SequenceContext>(req.sampling);
          q.context->constraint = req.constraint;
        } catch (const std::invalid_argument& e) {
          return fail(std::string("sampling: ") + e.what());
        }
        q.context->tokens = req.prompt;
        q.context->prompt_tokens = req.prompt.size();
        if (req.prompt_logprobs) q.prompt_logprobs.resize(req.prompt.size() - 1);  // filled as the prompt's rows are scored
        q.arrival_ns = now_ns();
        q.first_step = s.steps + (s.step_in_flight ? 1 : 0);
        q.request = std::move(req);
        q.cache_ns = cache_namespace(q.request.api_key, q.request.cache_salt);
        q.promise = self->make_response_promise<GenerateResult>();
        if (s.m.tokens_in) s.m.tokens_in->add({s.init.name}, double(q.tokens().size()));
        auto promise = q.promise;
        s.seqs.push_back(std::move(q));
        // A prompt whose log-probabilities are asked for computes every row: no cached prefix.
        // One that shares whole blocks with a prompt still to be computed waits for them (wait_for_prefix).
        if (s.init.prefix_cache && !s.seqs.back().request.prompt_logprobs && !wait_for_prefix(s, s.seqs.back()))
          look_up(self, s.seqs.back());
        update_gauges(s);
        tick(self);
        return promise;
      },
      [=](swap_atom, SlotSwap swap) -> caf::result<SwapResult> {
        auto& s = self->state;
        const SlotInfo& info = swap.slot.info();
        if (info.owner == SlotOwner::engine) {
          const std::string name = swap.slot.name();
          if (!swap.instance && !info.unloadable) return SwapResult{false, "the " + name + " slot cannot be empty"};
          const PluginInstance* current = s.init.plugins.get(swap.slot);
          std::string old = current ? current->id() + " " + current->version() : "(none)";
          // Takes effect at the next decision; the old instance goes when the last reference does.
          s.init.plugins.set(swap.slot, std::move(swap.instance));
          s.swaps.applied(name, swap.requested_ns, s.seqs.empty());
          const PluginInstance* fresh = s.init.plugins.get(swap.slot);
          std::string now = fresh ? fresh->id() + " " + fresh->version() : "(none)";
          spdlog::info("engine {}: {} {} -> {}", s.init.name, name, old, now);
          if (swap.slot == slot_of(TH_KIND_SPEC_DECODE)) {
            warn_no_speculation(s);
            s.draft_control.forget_propose_cost();  // another proposer: its drafts cost what it shows
          }
          return SwapResult{true, name + ": " + old + " -> " + now};
        }
        swap.engine_idle = s.seqs.empty() && !s.step_in_flight;
        // A connector layer may arrive: from now on the engine asks for finished transfers (harmless
        // when the worker refuses the change or has none).
        if (swap.slot == slot_of(TH_KIND_KV_CONNECTOR) && swap.instance) s.init.kv_connectors = true;
        return self->delegate(s.init.worker, swap_atom::value, std::move(swap));
      },
      [=](status_atom, const std::string&) -> caf::result<StatusJson> {
        auto rp = self->make_response_promise<StatusJson>();
        auto& s = self->state;
        nlohmann::json j = {{"name", s.init.name},
                            {"model", s.init.model},
                            {"sequences", s.seqs.size()},
                            {"waiting", std::count_if(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.state == TH_SEQ_WAITING; })},
                            {"steps", s.steps},
                            {"tokens_out", s.tokens_out},
                            {"preemptions", s.preemptions},
                            {"draining", s.draining},
                            {"retiring", s.retiring},
                            {"last_engine_swap", s.swaps.last()},
                            {"speculation", {{"enabled", speculating(s)},
                                             {"drafts", s.spec_drafts},
                                             {"draft_tokens", s.spec_drafted},
                                             {"accepted_tokens", s.spec_accepted},
                                             {"propose_failures", s.spec_propose_failures},
                                             {"max_draft", s.init.max_draft},
                                             {"controller", controller_json(s)}}},
                            {"prefix_cache", {{"enabled", s.init.prefix_cache},
                                              {"lookups", s.prefix_lookups},
                                              {"hits", s.prefix_hits},
                                              {"cached_tokens", s.prefix_cached_tokens},
                                              {"failures", s.prefix_failures},
                                              {"waits", s.prefix_waits},
                                              {"summary_blocks", s.init.prefix_summary ? s.init.prefix_summary->size() : 0}}},
                            {"sliding_window", {{"enabled", s.init.window.on()},
                                                {"sink_positions", s.init.window.sinks},
                                                {"max_positions", s.init.window.cap},
                                                {"slide_positions", s.init.window.slide},
                                                {"slides", s.window_slides},
                                                {"released_positions", s.window_released}}},
                            {"kv_accounting", {{"planned_blocks", s.kv_planned},
                                               {"reported_blocks", s.kv_reported},
                                               {"disagreements", s.kv_disagreements}}}};
        if (!s.init.no_speculation.empty()) j["speculation"]["why_not"] = s.init.no_speculation;
        if (s.init.drafts) {  // the draft models its proposer opened sessions on, each with its KV pool
          auto& models = j["speculation"]["draft_models"] = nlohmann::json::array();
          for (const DraftModelStatus& d : s.init.drafts->status())
            models.push_back({{"model", d.model}, {"n_layers", d.n_layers}, {"sessions", d.sessions},
                              {"kv_blocks_used", d.blocks_used}, {"kv_blocks_total", d.blocks_total},
                              {"tokens_drafted", d.tokens_drafted}, {"tokens_computed", d.tokens_computed}});
        }
        for (SlotId slot : slots_owned_by(SlotOwner::engine))  // each slot the engine owns, under its name (null: empty)
          j[slot.name()] = plugin_json(s.init.plugins.get(slot));
        self->request(s.init.worker, caf::infinite, status_atom::value, std::string())
            .then([rp, j](const StatusJson& w) mutable {
              nlohmann::json worker = nlohmann::json::parse(w.json);
              for (auto& [k, v] : worker.items()) j[k] = v;
              rp.deliver(StatusJson{api::dump_json(j)});
            });
        return rp;
      },
      [=](cancel_atom, uint64_t id) {
        // Dropped before the next step is scheduled (at once when none is in flight).
        if (Sequence* q = find(self->state, id)) q->cancel_requested = true;
        tick(self);
      },
      [=](drain_atom) {
        auto& s = self->state;
        s.draining = true;
        // Requests not started yet end with an error; those running finish.
        for (size_t i = 0; i < s.seqs.size();) {
          if (s.seqs[i].state != TH_SEQ_RUNNING) finish(self, i, "error", "the server is shutting down");
          else ++i;
        }
        tick(self);
      },
      [=](retire_atom) {
        auto& s = self->state;
        s.retiring = true;
        // Requests not started (no KV, no token sent) go back to the router for the engine that
        // replaces this one; those started finish here.
        size_t handed_back = 0;
        for (size_t i = 0; i < s.seqs.size();) {
          const Sequence& q = s.seqs[i];
          if (q.state == TH_SEQ_WAITING && q.generated == 0 && q.prefilled == q.cached) {  // at most a cached prefix
            Sequence seq = std::move(s.seqs[i]);
            s.seqs.erase(s.seqs.begin() + long(i));
            release_kv(self, seq);
            GenerateResult r;
            r.finish_reason = GenerateResult::kRerouted;
            r.engine = s.init.name;
            seq.promise.deliver(std::move(r));
            ++handed_back;
          } else {
            ++i;
          }
        }
        spdlog::info("engine {} retiring: {} request(s) to finish, {} not started handed back to the router", s.init.name,
                     s.seqs.size(), handed_back);
        tick(self);
      },
      [=](tick_atom) { tick(self); },
  };
}

}  // namespace

engine_actor spawn_engine(caf::actor_system& sys, EngineInit init) { return sys.spawn(engine, std::move(init)); }

}  // namespace tokenhost
