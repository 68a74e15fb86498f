#include <algorithm>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actors/engine_state.hpp"
#include "actors/plugin_seconds.hpp"
#include "speculation/drafts.hpp"
#include "plugin/host_api.hpp"

namespace tokenhost {

SlidingWindow plan_sliding_window(uint32_t sinks, uint32_t window, uint32_t block_size, uint32_t total_blocks, uint32_t context_len) {
  SlidingWindow w;
  if (window == 0) return w;
  if (block_size == 0) throw std::invalid_argument("the kvcache reports no block size");
  if (window < 2 * block_size)
    throw std::invalid_argument("sliding_window " + std::to_string(window) + " is under two KV blocks of " + std::to_string(block_size) +
                                " positions: the window releases whole blocks and keeps at least one");
  w.sinks = (sinks + block_size - 1) / block_size * block_size;
  if (uint64_t(w.sinks) + window > context_len)
    throw std::invalid_argument("attention_sinks " + std::to_string(sinks) + " (" + std::to_string(w.sinks) +
                                " in whole blocks) and sliding_window " + std::to_string(window) + " pass the model's context of " +
                                std::to_string(context_len) + " positions, past which its position embeddings were never trained");
  w.cap = w.sinks + window;
  if (uint64_t(total_blocks) * block_size < w.cap)
    throw std::invalid_argument("one sequence's window holds up to " + std::to_string(w.cap) + " positions, more than the " +
                                std::to_string(total_blocks) + " KV blocks of " + std::to_string(block_size) + " positions hold");
  w.slide = std::max(block_size, window / 4 / block_size * block_size);
  return w;
}

namespace engine_detail {

th_sched_seq sched_view(const EngineState& s, const Sequence& q) {
  th_sched_seq v{q.request.id, q.loading ? TH_SEQ_LOADING : q.state, q.request.priority, q.arrival_ns, q.prompt_len(), q.prefilled,
                 q.generated, q.request.max_tokens, blocks_for(q.kv_positions(), s.kv.block_size)};
  if (!s.init.window.on()) return v;
  // Cache positions: what the window released is left out, and no more than its cap is ever asked.
  const uint32_t cap = s.init.window.cap;
  v.prefilled = q.kv_positions();
  // A sequence that has generated decodes one more position after its prompt: that one fits too.
  v.prompt_len = std::min(q.prompt_len() - q.dropped, cap - (q.generated > 0 ? 1 : 0));
  const uint32_t left = q.request.max_tokens > q.generated ? q.request.max_tokens - q.generated : 0;
  v.max_new_tokens = q.generated + std::min(left, cap - v.prompt_len);
  return v;
}

namespace {
// A step's rows and sampled tokens, before any draft.
uint32_t step_rows(const StepBatch& batch) {
  uint32_t n = 0;
  for (const auto& item : batch.items) n += uint32_t(item.tokens.size());
  return n;
}
uint32_t step_tokens(const StepBatch& batch) {
  uint32_t n = 0;
  for (const auto& item : batch.items) n += item.sample ? 1 : 0;
  return n;
}
}  // namespace

uint32_t draft_bound(const EngineState& s, const Sequence& q) {
  const uint32_t limit = kv_limit(s);
  if (!speculating(s) || q.state != TH_SEQ_RUNNING || q.generated == 0 ||
      q.prefilled + 1 != q.tokens().size() || q.kv_positions() + 2 > limit)
    return 0;
  return std::min({q.request.max_draft, s.init.max_draft, limit - q.kv_positions() - 1});
}

std::optional<DraftJob> plan_drafts(EngineState& s, const StepBatch& batch, const std::vector<uint32_t>* grants) {
  if (!speculating(s)) return std::nullopt;
  DraftJob job;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const StepItem& item = batch.items[i];
    if (!item.sample || item.tokens.size() != 1) continue;
    const Sequence* q = find(s, item.seq_id);
    if (q == nullptr) continue;
    const uint32_t max_draft = std::min(draft_bound(s, *q), grants ? grants->at(i) : kMaxDraftTokens);
    if (max_draft == 0) continue;
    job.candidates.push_back({i, &q->tokens(), max_draft});
    job.contexts.push_back(q->context);
  }
  if (job.candidates.empty()) return std::nullopt;
  // The controller keeps what pays of each draft: the step's rows and tokens without drafts against
  // each draft's expected kept tokens. It chooses first on the bounds, so that a proposer whose drafts
  // cost compute (a draft model) is asked only for what could be kept, then again on the drafts.
  std::vector<DraftController::Offer> bounds;
  for (const auto& c : job.candidates) bounds.push_back({batch.items[c.item].seq_id, c.max_draft});
  const std::vector<uint32_t> ask = s.draft_control.choose(bounds, step_tokens(batch), step_rows(batch));
  size_t kept = 0;  // the candidates asked for a draft, in place, in order
  for (size_t k = 0; k < job.candidates.size(); ++k)
    if (ask[k] > 0) {
      job.candidates[kept] = {job.candidates[k].item, job.candidates[k].tokens, ask[k]};
      job.contexts[kept] = std::move(job.contexts[k]);
      ++kept;
    }
  if (kept == 0) return std::nullopt;
  job.candidates.resize(kept);
  job.contexts.resize(kept);
  job.spec = s.init.plugins.stack(slot_of(TH_KIND_SPEC_DECODE)).front();
  job.bounds = DraftBounds{s.init.name, s.init.vocab_size, kv_limit(s), s.init.max_step_tokens};
  job.batch = batch;
  return job;
}

void take_drafts(EngineState& s, DraftReply& reply) {
  StepBatch& batch = reply.batch;
  s.spec_propose_failures = reply.propose_failures;
  uint32_t proposed = 0, base_rows = 0, base_tokens = 0;
  for (const auto& item : batch.items) {
    proposed += item.n_draft;
    base_rows += uint32_t(item.tokens.size()) - item.n_draft;
    base_tokens += item.sample ? 1 : 0;
  }
  s.draft_control.observe_propose(proposed, reply.seconds);
  std::vector<DraftController::Offer> offers;
  std::vector<StepItem*> drafted;
  for (auto& item : batch.items)
    if (item.n_draft > 0) offers.push_back({item.seq_id, item.n_draft}), drafted.push_back(&item);
  if (offers.empty()) return;
  const std::vector<uint32_t> keep = s.draft_control.choose(offers, base_tokens, base_rows);
  for (size_t k = 0; k < drafted.size(); ++k) drafted[k]->cut_draft(keep[k]);
}

void warn_no_speculation(const EngineState& s) {
  if (s.init.spec_decode() && !s.init.no_speculation.empty())
    spdlog::warn("engine {}: runs without speculative decoding ({} stays idle): {}", s.init.name, s.init.spec_decode()->id(),
                 s.init.no_speculation);
}

bool sched_grants_drafts(const EngineState& s) { return s.init.scheduler().library().abi_minor() >= 4; }

std::string decide(EngineState& s, std::vector<th_sched_item>& run, std::vector<uint64_t>& preempt_ids,
                   std::vector<uint32_t>& grants) {
  // A sequence whose prompt the worker is still looking up is not shown: its prefilled is not known. One
  // whose blocks a KV connector is loading is shown as TH_SEQ_LOADING to a scheduler built against 1.9
  // or later, and not at all to an older one (th_scheduler.h).
  const bool shows_loading = s.init.scheduler().library().abi_minor() >= 9;
  // Nor is one waiting for a leader's prefix (wait_for_prefix): it is looked up once the leader is done.
  auto hidden = [&](const Sequence& q) { return q.lookup_pending || q.prefix_leader != 0 || (q.loading && !shows_loading); };
  std::vector<th_sched_seq> view;
  std::vector<uint32_t> seq_draft, seq_cached;
  for (const auto& q : s.seqs) {
    if (hidden(q)) continue;
    view.push_back(sched_view(s, q));
    seq_draft.push_back(draft_bound(s, q));
    seq_cached.push_back(q.cached);
  }
  std::vector<uint32_t> clients;
  std::map<std::string, uint32_t> numbers;  // the clients present now keep theirs
  for (const auto& q : s.seqs) {
    if (hidden(q)) continue;
    auto [it, fresh] = numbers.try_emplace(q.request.client, 0);
    if (fresh) {
      auto known = s.client_numbers.find(q.request.client);
      it->second = known != s.client_numbers.end() ? known->second : s.next_client_number++;
    }
    clients.push_back(it->second);
  }
  s.client_numbers = std::move(numbers);
  th_sched_state state{sizeof(th_sched_state), view.data(), uint32_t(view.size()), s.kv.total_blocks,
                       s.kv.free_blocks, s.kv.block_size, s.init.max_step_tokens, s.init.max_step_seqs, now_ns(),
                       clients.data(), seq_draft.data(), seq_cached.data()};
  run.assign(view.size(), {});
  preempt_ids.assign(view.size(), 0);
  grants.assign(view.size(), 0);
  th_sched_decision d{sizeof d, run.data(), 0, preempt_ids.data(), 0, grants.data()};
  th_error err;
  auto& sched = s.init.scheduler();
  const uint64_t started = now_ns();
  // A throw comes out as PluginFault, for the engine to stop on (engine.cpp).
  const th_status st = sched.call(&th_scheduler_vtable::schedule, "schedule", sched.handle(), &state, &d, &err);
  if (s.m.scheduler_seconds) s.m.scheduler_seconds->add({s.init.name, slot_of(TH_KIND_SCHEDULER).name(), sched.id()}, double(now_ns() - started) * 1e-9);
  if (st != TH_OK) return sched.id() + " schedule() failed with " + status_name(st) + ": " + err.text();
  if (d.n_run > view.size() || d.n_preempt > view.size()) return sched.id() + " returned more entries than sequences";
  run.resize(d.n_run);
  preempt_ids.resize(d.n_preempt);
  grants.resize(d.n_run);
  if (!sched_grants_drafts(s)) grants.clear();  // it knows no run_draft: the host grants drafts
  std::set<uint64_t> seen;
  uint64_t total = 0;
  for (auto id : preempt_ids) {
    Sequence* q = find(s, id);
    if (q == nullptr || q->state != TH_SEQ_RUNNING) return sched.id() + " preempted sequence " + std::to_string(id) + ", which is not running";
  }
  for (size_t k = 0; k < run.size(); ++k) {
    const th_sched_item& item = run[k];
    Sequence* q = find(s, item.seq_id);
    if (q == nullptr || hidden(*q)) return sched.id() + " scheduled unknown sequence " + std::to_string(item.seq_id);
    if (q->loading)
      return sched.id() + " scheduled sequence " + std::to_string(item.seq_id) + ", which is loading its blocks (TH_SEQ_LOADING)";
    if (!seen.insert(item.seq_id).second) return sched.id() + " scheduled sequence " + std::to_string(item.seq_id) + " twice";
    const bool preempted = std::find(preempt_ids.begin(), preempt_ids.end(), item.seq_id) != preempt_ids.end();
    const uint32_t grant = k < grants.size() ? grants[k] : 0, bound = preempted ? 0 : draft_bound(s, *q);
    if (grant > bound)
      return sched.id() + " granted sequence " + std::to_string(item.seq_id) + " " + std::to_string(grant) +
             " draft tokens; it may take " + std::to_string(bound);
    total += grant;
    if (preempted) continue;  // runs again from scratch: checked against its state after the preemption below
    // With a window, no more than its cache can take next (what the view shows).
    uint32_t pending = uint32_t(q->tokens().size()) - q->prefilled;
    if (s.init.window.on()) pending = std::min(pending, s.init.window.cap - q->kv_positions());
    if (item.n_tokens == 0 || item.n_tokens > pending)
      return sched.id() + " gave sequence " + std::to_string(item.seq_id) + " " + std::to_string(item.n_tokens) +
             " tokens; it has " + std::to_string(pending) + " to process";
    total += item.n_tokens;
  }
  if (total > s.init.max_step_tokens)
    return sched.id() + " exceeded the step budget of " + std::to_string(s.init.max_step_tokens) + " tokens (draft tokens included)";
  if (run.size() > s.init.max_step_seqs) return sched.id() + " scheduled more than max_step_seqs sequences";
  return "";
}

void check_kv_accounting(EngineState& s, const KvState& kv) {
  // The blocks each sequence's positions need, a block shared by prefix caching once per holder, as
  // the plugin's held_blocks counts them; and the blocks of frees and slides still on their way: sent
  // while the step computed (those sent before it were answered before its result), so the step's
  // report counts them held (a retiring engine hands its waiting requests back with their cached
  // prefixes mid-step).
  uint32_t planned = s.kv_releasing;
  for (const auto& q : s.seqs) planned += blocks_for(q.kv_positions(), s.kv.block_size);
  s.kv_planned = planned;
  s.kv_reported = kv.held_blocks;
  if (s.kv_planned == s.kv_reported) return;
  if (s.kv_disagreements++ % 100 == 0)
    spdlog::warn("engine {}: after step {} the kvcache reports {} blocks in use, the sequences' positions need {} ({} such steps; {} frees in flight)",
                 s.init.name, s.steps, s.kv_reported, s.kv_planned, s.kv_disagreements, s.frees_in_flight);
}

}  // namespace engine_detail
}  // namespace tokenhost
