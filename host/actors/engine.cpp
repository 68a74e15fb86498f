#include "actors/engine.hpp"

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
#include "actors/speculation.hpp"
#include "plugin/kind.hpp"

namespace tokenhost {
namespace {

uint64_t now_ns() { return steady_now_ns(); }

struct Sequence {
  GenerateRequest request;
  std::shared_ptr<SequenceContext> context;  // tokens (prompt, then generated) and sampler
  uint32_t prefilled = 0;       // positions held in the KV cache
  uint32_t generated = 0;
  th_seq_state state = TH_SEQ_WAITING;
  uint64_t arrival_ns = 0, last_token_ns = 0;
  uint64_t first_token_ns = 0;  // 0 until the first token
  uint64_t first_step = 0;      // the engine's step count when it arrived, counting one in flight
  std::vector<SampledToken> logprobs;  // when the request asked for them
  caf::typed_response_promise<GenerateResult> promise;
  std::vector<int32_t>& tokens() { return context->tokens; }
  const std::vector<int32_t>& tokens() const { return context->tokens; }
  // Tokens the scheduler must prefill before the sequence decodes (see th_sched_seq.prompt_len).
  uint32_t prompt_len() const { return generated == 0 ? uint32_t(tokens().size()) : uint32_t(tokens().size()) - 1; }
  bool cancel_requested = false;
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
};

struct EngineState {
  EngineInit init;
  std::vector<Sequence> seqs;  // arrival order
  KvState kv;
  bool step_in_flight = false;
  bool draining = false;
  bool retiring = false;
  SwapLatency swaps;  // scheduler and spec_decode swaps (the worker keeps its own)  // replaced or removed: finishing what it has, then stopping
  bool kv_known = false;  // the worker has told the KV pool's size: scheduling may start
  uint64_t steps = 0, tokens_out = 0, preemptions = 0;
  // Speculative decoding since the engine started: drafts verified, their tokens, those accepted.
  uint64_t spec_drafts = 0, spec_drafted = 0, spec_accepted = 0, spec_propose_failures = 0;
  // After each step: the blocks the sequences' positions need by the engine's count, the blocks the
  // kvcache plugin reports in use, and how many steps the two disagreed (rolled-back drafts not given
  // back, a plugin's accounting off): the scheduler plans with the plugin's count.
  uint32_t kv_planned = 0, kv_reported = 0;
  uint64_t kv_disagreements = 0;
  uint32_t frees_in_flight = 0;  // free requests sent to the worker and not answered yet
  // The scheduler's client numbers (th_sched_state.seq_clients): one per client while it has
  // sequences here, never reused.
  std::map<std::string, uint32_t> client_numbers;
  uint32_t next_client_number = 0;
  EngineMetrics m;
  static inline const char* name = "tokenhost.engine";
};

using self_ptr = engine_actor::stateful_pointer<EngineState>;

void register_metrics(EngineState& s) {
  auto* r = s.init.metrics;
  if (r == nullptr) return;
  using metrics::Type;
  s.m.tokens_out = &r->family(Type::counter, "tokenhost_tokens_out_total", "Tokens generated", {"engine"});
  s.m.tokens_in = &r->family(Type::counter, "tokenhost_tokens_in_total", "Prompt tokens received", {"engine"});
  s.m.requests = &r->family(Type::counter, "tokenhost_requests_total", "Requests finished, by outcome", {"engine", "finish_reason"});
  s.m.step_seconds = &r->family(Type::histogram, "tokenhost_step_seconds", "Wall time of one engine step", {"engine"});
  s.m.step_compute_seconds = &r->family(Type::histogram, "tokenhost_step_compute_seconds",
                                        "Time the worker spent computing one step (the rest of a step's wall time "
                                        "is messages between the engine and its worker)",
                                        {"engine"});
  s.m.step_tokens = &r->family(Type::counter, "tokenhost_step_tokens_total",
                               "Tokens computed by engine steps: prompt chunks and decode tokens, a step's rows", {"engine"});
  s.m.running = &r->family(Type::gauge, "tokenhost_sequences_running", "Sequences with KV blocks", {"engine"});
  s.m.waiting = &r->family(Type::gauge, "tokenhost_sequences_waiting", "Sequences waiting or preempted", {"engine"});
  s.m.kv_free = &r->family(Type::gauge, "tokenhost_kv_blocks_free", "Free KV cache blocks", {"engine"});
  s.m.preemptions = &r->family(Type::counter, "tokenhost_preemptions_total", "Sequences preempted for KV blocks", {"engine"});
  s.m.kv_used = &r->family(Type::gauge, "tokenhost_kv_blocks_used", "KV cache blocks held by sequences", {"engine"});
  const std::vector<double> latency = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  s.m.ttft = &r->family(Type::histogram, "tokenhost_time_to_first_token_seconds",
                        "From a request's arrival at the engine to its first generated token", {"engine"}, latency);
  s.m.ttft_steps = &r->family(Type::histogram, "tokenhost_time_to_first_token_steps",
                              "Engine steps started from a request's arrival at the engine to its first token, that "
                              "step included (1: the next step served it): how long the scheduler made it wait",
                              {"engine"}, {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128});
  s.m.itl = &r->family(Type::histogram, "tokenhost_inter_token_latency_seconds",
                       "Between successive generated tokens of one request", {"engine"}, latency);
  s.m.e2e = &r->family(Type::histogram, "tokenhost_request_duration_seconds",
                       "From a request's arrival at the engine to its end", {"engine"}, latency);
  s.m.scheduler_seconds = &plugin_seconds_family(*r);
  s.m.draft_tokens = &r->family(Type::counter, "tokenhost_spec_draft_tokens_total",
                                "Draft tokens the spec_decode plugin proposed and the engine verified", {"engine", "plugin"});
  s.m.accepted_tokens = &r->family(Type::counter, "tokenhost_spec_accepted_tokens_total",
                                   "Draft tokens the target model agreed with: each one a token without a step of its own",
                                   {"engine", "plugin"});
  s.m.accepted_length = &r->family(Type::histogram, "tokenhost_spec_accepted_length",
                                   "Draft tokens accepted per verified draft (its count: drafts verified)", {"engine", "plugin"},
                                   {0, 1, 2, 3, 4, 6, 8, 12, 16});
}

void update_gauges(EngineState& s) {
  // A retiring engine leaves the gauges of its name to the engine that replaced it.
  if (s.m.running == nullptr || s.retiring) return;
  size_t running = std::count_if(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.state == TH_SEQ_RUNNING; });
  s.m.running->set({s.init.name}, double(running));
  s.m.waiting->set({s.init.name}, double(s.seqs.size() - running));
  s.m.kv_free->set({s.init.name}, double(s.kv.free_blocks));
  s.m.kv_used->set({s.init.name}, double(s.kv.total_blocks - std::min(s.kv.free_blocks, s.kv.total_blocks)));
}

uint32_t blocks_for(uint32_t positions, uint32_t block_size) {
  return block_size == 0 ? 0 : (positions + block_size - 1) / block_size;
}

void tick(self_ptr self);

void finish(self_ptr self, size_t index, const std::string& reason, const std::string& error = {}) {
  auto& s = self->state;
  Sequence seq = std::move(s.seqs[index]);
  s.seqs.erase(s.seqs.begin() + long(index));
  if (seq.prefilled > 0 || seq.state == TH_SEQ_RUNNING) {
    ++s.frees_in_flight;
    self->request(s.init.worker, caf::infinite, free_atom::value, seq.request.id).then([self](const KvState& kv) {
      self->state.kv = kv;
      update_gauges(self->state);
      if (--self->state.frees_in_flight == 0) tick(self);
    });
  }
  GenerateResult r;
  r.tokens.assign(seq.tokens().begin() + long(seq.request.prompt.size()), seq.tokens().end());
  r.finish_reason = reason;
  r.engine = s.init.name;
  r.error = error;
  r.logprobs = std::move(seq.logprobs);
  if (seq.first_token_ns != 0) r.ttft_s = double(seq.first_token_ns - seq.arrival_ns) * 1e-9;
  if (seq.generated >= 2) r.itl_s = double(seq.last_token_ns - seq.first_token_ns) * 1e-9 / double(seq.generated - 1);
  if (reason == "length" || reason == "stop") r.e2e_s = double(now_ns() - seq.arrival_ns) * 1e-9;
  if (s.m.requests) s.m.requests->add({s.init.name, reason}, 1);
  if (s.m.e2e && reason != "error") s.m.e2e->observe({s.init.name}, double(now_ns() - seq.arrival_ns) * 1e-9);
  const auto& spec = s.init.spec_decode;
  if (spec && spec->fn(&th_spec_decode_vtable::seq_end))
    spec->call(&th_spec_decode_vtable::seq_end, "seq_end", spec->handle(), seq.request.id);
  seq.promise.deliver(std::move(r));
}

void preempt(self_ptr self, Sequence& seq) {
  auto& s = self->state;
  // The blocks it holds now, counted free until the worker's reply says exactly: the scheduler may
  // decide the next step before that reply, so this must not count more than will be freed.
  const uint32_t held = blocks_for(seq.prefilled, s.kv.block_size);
  seq.state = TH_SEQ_PREEMPTED;
  seq.prefilled = 0;
  ++s.preemptions;
  if (s.m.preemptions) s.m.preemptions->add({s.init.name}, 1);
  // The worker handles messages in order: this free lands before the next step.
  ++s.frees_in_flight;
  self->request(s.init.worker, caf::infinite, free_atom::value, seq.request.id).then([self](const KvState& kv) {
    self->state.kv = kv;
    if (--self->state.frees_in_flight == 0) tick(self);
  });
  s.kv.free_blocks = std::min(s.kv.total_blocks, s.kv.free_blocks + held);
}

// Where the engine holds the instance of one of its slots (the slot table's rows it owns). Slot names
// the table gives it only: any other is a bug.
std::shared_ptr<PluginInstance>* held(EngineInit& init, const std::string& slot) {
  if (slot == "scheduler") return &init.scheduler;
  if (slot == "spec_decode") return &init.spec_decode;
  throw std::logic_error("the engine holds no slot '" + slot + "'");
}

Sequence* find(EngineState& s, uint64_t id) {
  for (auto& q : s.seqs)
    if (q.request.id == id) return &q;
  return nullptr;
}

// Speculative decoding: the draft tokens the engine would verify with sequence q in the next step (the
// scheduler's th_sched_state.seq_draft): for a sequence that decodes a token after its first, within its
// request's max_draft, the engine's limit and the context; 0 when the engine cannot speculate.
uint32_t draft_bound(const EngineState& s, const Sequence& q) {
  if (!s.init.spec_decode || !s.init.no_speculation.empty() || q.state != TH_SEQ_RUNNING || q.generated == 0 ||
      q.prefilled + 1 != q.tokens().size() || q.prefilled + 2 > s.init.context_len)
    return 0;
  return std::min({q.request.max_draft, kDefaultMaxDraft, s.init.context_len - q.prefilled - 1});
}

// The proposer's drafts for the step's items: each within the scheduler's grant (grants, parallel to the
// items: a 1.4 scheduler's run_draft), or, for a scheduler that grants none itself, within draft_bound()
// and the budget the step has left; speculation.cpp adds what the step can verify.
void add_drafts(EngineState& s, StepBatch& batch, const std::vector<uint32_t>* grants) {
  const auto& spec = s.init.spec_decode;
  if (!spec || !s.init.no_speculation.empty()) return;
  std::vector<DraftCandidate> candidates;
  for (size_t i = 0; i < batch.items.size(); ++i) {
    const StepItem& item = batch.items[i];
    if (!item.sample || item.tokens.size() != 1) continue;
    const Sequence* q = find(s, item.seq_id);
    if (q == nullptr) continue;
    const uint32_t max_draft = std::min(draft_bound(s, *q), grants ? grants->at(i) : kMaxDraftTokens);
    if (max_draft > 0) candidates.push_back({i, &q->tokens(), max_draft});
  }
  add_drafts(*spec, DraftBounds{s.init.name, s.init.vocab_size, s.init.context_len, s.init.max_step_tokens}, candidates, batch,
             s.spec_propose_failures);
}

// A spec_decode plugin the engine cannot use says so in the log (at start and when swapped in).
void warn_no_speculation(const EngineState& s) {
  if (s.init.spec_decode && !s.init.no_speculation.empty())
    spdlog::warn("engine {}: runs without speculative decoding ({} stays idle): {}", s.init.name, s.init.spec_decode->id(),
                 s.init.no_speculation);
}

// Asks the scheduler plugin for a decision and checks it. Returns an error message, or "".
// Whether the engine's scheduler grants draft tokens itself (built against ABI 1.4 or later).
bool sched_grants_drafts(const EngineState& s) { return s.init.scheduler->library().abi_minor() >= 4; }

// grants: the draft tokens the scheduler granted each run entry (ABI 1.4 run_draft), cleared when the
// scheduler was built against an older minor and grants none itself.
std::string decide(EngineState& s, std::vector<th_sched_item>& run, std::vector<uint64_t>& preempt_ids,
                   std::vector<uint32_t>& grants) {
  std::vector<th_sched_seq> view;
  std::vector<uint32_t> seq_draft;
  for (const auto& q : s.seqs) {
    view.push_back({q.request.id, q.state, q.request.priority, q.arrival_ns, q.prompt_len(), q.prefilled, q.generated,
                    q.request.max_tokens, blocks_for(q.prefilled, s.kv.block_size)});
    seq_draft.push_back(draft_bound(s, q));
  }
  std::vector<uint32_t> clients;
  std::map<std::string, uint32_t> numbers;  // the clients present now keep theirs
  for (const auto& q : s.seqs) {
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
                       clients.data(), seq_draft.data()};
  run.assign(view.size(), {});
  preempt_ids.assign(view.size(), 0);
  grants.assign(view.size(), 0);
  th_sched_decision d{sizeof d, run.data(), 0, preempt_ids.data(), 0, grants.data()};
  th_error err;
  auto& sched = *s.init.scheduler;
  const uint64_t started = now_ns();
  th_status st = sched.call(&th_scheduler_vtable::schedule, "schedule", sched.handle(), &state, &d, &err);
  if (s.m.scheduler_seconds) s.m.scheduler_seconds->add({s.init.name, "scheduler", sched.id()}, double(now_ns() - started) * 1e-9);
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
  for (const auto& item : run) {
    Sequence* q = find(s, item.seq_id);
    if (q == nullptr) return sched.id() + " scheduled unknown sequence " + std::to_string(item.seq_id);
    if (!seen.insert(item.seq_id).second) return sched.id() + " scheduled sequence " + std::to_string(item.seq_id) + " twice";
    if (std::find(preempt_ids.begin(), preempt_ids.end(), item.seq_id) != preempt_ids.end())
      continue;  // runs again from scratch: checked against its state after the preemption below
    uint32_t pending = uint32_t(q->tokens().size()) - q->prefilled;
    if (item.n_tokens == 0 || item.n_tokens > pending)
      return sched.id() + " gave sequence " + std::to_string(item.seq_id) + " " + std::to_string(item.n_tokens) +
             " tokens; it has " + std::to_string(pending) + " to process";
    total += item.n_tokens;
  }
  for (size_t k = 0; k < grants.size(); ++k) {
    const Sequence* q = find(s, run[k].seq_id);
    const bool preempted = std::find(preempt_ids.begin(), preempt_ids.end(), run[k].seq_id) != preempt_ids.end();
    const uint32_t bound = preempted ? 0 : draft_bound(s, *q);
    if (grants[k] > bound)
      return sched.id() + " granted sequence " + std::to_string(run[k].seq_id) + " " + std::to_string(grants[k]) +
             " draft tokens; it may take " + std::to_string(bound);
    total += grants[k];
  }
  if (total > s.init.max_step_tokens)
    return sched.id() + " exceeded the step budget of " + std::to_string(s.init.max_step_tokens) + " tokens (draft tokens included)";
  if (run.size() > s.init.max_step_seqs) return sched.id() + " scheduled more than max_step_seqs sequences";
  return "";
}

void fail_all(self_ptr self, const std::string& error) {
  while (!self->state.seqs.empty()) finish(self, 0, "error", error);
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

void tick(self_ptr self) {
  auto& s = self->state;
  if (!s.kv_known) return;
  drop_cancelled(self);
  if (s.step_in_flight || s.seqs.empty()) {
    if ((s.draining || s.retiring) && s.seqs.empty() && !s.step_in_flight) {
      if (s.retiring) spdlog::info("engine {} retired: its last request is done", s.init.name);
      self->send_exit(s.init.worker, caf::exit_reason::user_shutdown);
      self->quit();
    }
    return;
  }
  std::vector<th_sched_item> run;
  std::vector<uint64_t> preempt_ids;
  std::vector<uint32_t> grants;
  std::string problem = decide(s, run, preempt_ids, grants);
  if (!problem.empty()) {
    spdlog::error("engine {}: {}; failing {} requests", s.init.name, problem, s.seqs.size());
    fail_all(self, "scheduler error: " + problem);
    return;
  }
  for (auto id : preempt_ids) preempt(self, *find(s, id));
  if (run.empty()) {
    // Blocks on their way back: decide again once the worker has freed them.
    if (s.frees_in_flight > 0) return;
    // The scheduler waits for resources; with nothing running, nothing will free any: a request that
    // can never fit must not wait forever.
    bool any_running = std::any_of(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.state == TH_SEQ_RUNNING; });
    if (!any_running) {
      // The request that cannot fit even in the whole cache, else the oldest.
      size_t victim = 0;
      for (size_t i = 0; i < s.seqs.size(); ++i) {
        if (blocks_for(s.seqs[i].prompt_len() + 1, s.kv.block_size) > s.kv.total_blocks) {
          victim = i;
          break;
        }
      }
      spdlog::error("engine {}: scheduler {} runs nothing with the KV cache empty; failing request {}", s.init.name,
                    s.init.scheduler->id(), s.seqs[victim].request.id);
      finish(self, victim, "error",
             "the request needs " + std::to_string(blocks_for(s.seqs[victim].prompt_len() + 1, s.kv.block_size)) +
                 " KV blocks; engine " + s.init.name + " has " + std::to_string(s.kv.total_blocks));
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
    si.start = q.prefilled;
    si.tokens.assign(q.tokens().begin() + q.prefilled, q.tokens().begin() + q.prefilled + n);
    si.sample = q.prefilled + n == q.tokens().size();
    si.context = q.context;
    q.state = TH_SEQ_RUNNING;
    batch.items.push_back(std::move(si));
  }
  add_drafts(s, batch, sched_grants_drafts(s) ? &grants : nullptr);
  s.step_in_flight = true;
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
            if (self->state.m.step_tokens && r.error.empty()) {
              size_t rows = 0;
              for (const auto& item : batch.items) rows += item.tokens.size();
              self->state.m.step_tokens->add({self->state.init.name}, double(rows));
            }
            on_step_done(self, batch, r);
          },
          [self, batch](caf::error& e) {
            StepResult r;
            r.error = "worker failed: " + self->system().render(e);
            r.status = TH_ERR_INTERNAL;
            on_step_done(self, batch, r);
          });
}

// Every block the kvcache reports in use after a step holds positions of the engine's sequences: the
// frees sent before the step have landed, and none is sent while a step is in flight. A disagreement is
// logged (the first, then each 100th) and counted in the admin status.
void check_kv_accounting(EngineState& s, const KvState& kv) {
  uint32_t planned = 0;
  for (const auto& q : s.seqs) planned += blocks_for(q.prefilled, s.kv.block_size);
  s.kv_planned = planned;
  s.kv_reported = kv.total_blocks - std::min(kv.free_blocks, kv.total_blocks);
  if (s.kv_planned == s.kv_reported) return;
  if (s.kv_disagreements++ % 100 == 0)
    spdlog::warn("engine {}: after step {} the kvcache reports {} blocks in use, the sequences' positions need {} ({} such steps)",
                 s.init.name, s.steps, s.kv_reported, s.kv_planned, s.kv_disagreements);
}

void on_step_done(self_ptr self, const StepBatch& batch, const StepResult& result) {
  auto& s = self->state;
  s.step_in_flight = false;
  ++s.steps;
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
    for (const auto& item : batch.items) {
      Sequence* q = find(s, item.seq_id);
      const uint32_t accepted = item.sample ? result.accepted.at(sampled_item) : 0;
      const uint32_t drafted = item.sample ? result.drafted.at(sampled_item) : 0;
      const size_t run_begin = sampled;
      if (item.sample) sampled += accepted + 1, ++sampled_item;
      if (q == nullptr || q->state != TH_SEQ_RUNNING) continue;
      // The KV cache holds the item's own tokens and the draft tokens the target agreed with.
      q->prefilled += uint32_t(item.tokens.size()) - item.n_draft + accepted;
      if (!item.sample) continue;
      if (drafted > 0) {
        const auto& spec = s.init.spec_decode;
        ++s.spec_drafts;
        s.spec_drafted += drafted;
        s.spec_accepted += accepted;
        if (s.m.draft_tokens && spec) s.m.draft_tokens->add({s.init.name, spec->id()}, drafted);
        if (s.m.accepted_tokens && spec) s.m.accepted_tokens->add({s.init.name, spec->id()}, accepted);
        if (s.m.accepted_length && spec) s.m.accepted_length->observe({s.init.name, spec->id()}, accepted);
        if (spec && spec->fn(&th_spec_decode_vtable::accepted))
          spec->call(&th_spec_decode_vtable::accepted, "accepted", spec->handle(), item.seq_id, drafted, accepted);
      }
      // Each token of the run as plain decoding would have given it, one at a time: the run stops where
      // the request does (end of sequence, max_tokens, the context), and what follows is dropped.
      for (uint32_t k = 0; k <= accepted; ++k) {
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
        if ((t.token == s.init.eos && !q->request.ignore_eos) || q->generated >= q->request.max_tokens ||
            q->tokens().size() >= s.init.context_len)
          break;
      }
    }
    check_kv_accounting(s, result.kv);
    for (size_t i = 0; i < s.seqs.size();) {
      const Sequence& q = s.seqs[i];
      if (q.generated > 0 && q.tokens().back() == s.init.eos && !q.request.ignore_eos) {
        finish(self, i, "stop");
      } else if (q.generated >= q.request.max_tokens || q.tokens().size() >= s.init.context_len) {
        finish(self, i, "length");
      } else {
        ++i;
      }
    }
  }
  // The pool as the step left it (a failed step reports it too). Frees sent since are not in it: until
  // their replies come the free count is low, never high, so a step decided meanwhile (a new request
  // or a cancel ticks the engine) never reserves blocks that are not there.
  s.kv = result.kv;
  update_gauges(s);
  if (s.frees_in_flight == 0) {
    tick(self);
    return;
  }
  // Frees are on their way to the worker: ask after them (it handles messages in order).
  self->request(s.init.worker, caf::infinite, status_atom::value).then([self](const KvState& kv) {
    self->state.kv = kv;
    update_gauges(self->state);
    tick(self);
  });
}

engine_actor::behavior_type engine(self_ptr self, EngineInit init) {
  self->state.init = std::move(init);
  register_metrics(self->state);
  warn_no_speculation(self->state);
  self->state.swaps.bind(self->state.init.metrics, self->state.init.name);
  self->state.swaps.applied("kvcache", self->state.init.kvcache_swap_requested_ns);
  self->request(self->state.init.worker, caf::infinite, status_atom::value).then([self](const KvState& kv) {
    self->state.kv = kv;
    self->state.kv_known = true;
    update_gauges(self->state);
    tick(self);
  });
  return {
      [=](generate_atom, GenerateRequest req) -> caf::result<GenerateResult> {
        auto& s = self->state;
        auto fail = [&](std::string why) { return GenerateResult::failed(s.init.name, std::move(why)); };
        if (s.draining) return fail("the server is shutting down");
        if (req.prompt.empty()) return fail("the prompt is empty");
        if (req.max_tokens == 0) return fail("max_tokens must be at least 1");
        if (req.prompt.size() + 1 > s.init.context_len)
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
        } catch (const std::invalid_argument& e) {
          return fail(std::string("sampling: ") + e.what());
        }
        q.context->tokens = req.prompt;
        q.arrival_ns = now_ns();
        q.first_step = s.steps + (s.step_in_flight ? 1 : 0);
        q.request = std::move(req);
        q.promise = self->make_response_promise<GenerateResult>();
        if (s.m.tokens_in) s.m.tokens_in->add({s.init.name}, double(q.tokens().size()));
        auto promise = q.promise;
        s.seqs.push_back(std::move(q));
        update_gauges(s);
        tick(self);
        return promise;
      },
      [=](swap_atom, SlotSwap swap) -> caf::result<SwapResult> {
        auto& s = self->state;
        const SlotInfo* info = find_slot(swap.slot);
        if (info != nullptr && info->owner == SlotOwner::engine) {
          auto& slot = *held(s.init, swap.slot);
          if (!swap.instance && !info->unloadable) return SwapResult{false, "the " + swap.slot + " slot cannot be empty"};
          std::string old = slot ? slot->id() + " " + slot->version() : "(none)";
          // Takes effect at the next decision; the old instance goes when the last reference does.
          slot = std::move(swap.instance);
          s.swaps.applied(swap.slot, swap.requested_ns, s.seqs.empty());
          std::string now = slot ? slot->id() + " " + slot->version() : "(none)";
          spdlog::info("engine {}: {} {} -> {}", s.init.name, swap.slot, old, now);
          if (swap.slot == "spec_decode") warn_no_speculation(s);
          return SwapResult{true, swap.slot + ": " + old + " -> " + now};
        }
        swap.engine_idle = s.seqs.empty() && !s.step_in_flight;
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
                            {"speculation", {{"enabled", s.init.spec_decode && s.init.no_speculation.empty()},
                                             {"drafts", s.spec_drafts},
                                             {"draft_tokens", s.spec_drafted},
                                             {"accepted_tokens", s.spec_accepted},
                                             {"propose_failures", s.spec_propose_failures}}},
                            {"kv_accounting", {{"planned_blocks", s.kv_planned},
                                               {"reported_blocks", s.kv_reported},
                                               {"disagreements", s.kv_disagreements}}}};
        if (!s.init.no_speculation.empty()) j["speculation"]["why_not"] = s.init.no_speculation;
        for (const SlotInfo& slot : slot_table())  // each slot the engine owns, under its name (null: empty)
          if (slot.owner == SlotOwner::engine) j[slot.name] = plugin_json(*held(s.init, slot.name));
        self->request(s.init.worker, caf::infinite, status_atom::value, std::string())
            .then([rp, j](const StatusJson& w) mutable {
              nlohmann::json worker = nlohmann::json::parse(w.json);
              for (auto& [k, v] : worker.items()) j[k] = v;
              rp.deliver(StatusJson{j.dump()});
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
          if (q.state == TH_SEQ_WAITING && q.generated == 0 && q.prefilled == 0) {
            Sequence seq = std::move(s.seqs[i]);
            s.seqs.erase(s.seqs.begin() + long(i));
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
