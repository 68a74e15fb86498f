// scheduler rules: every decision over random engine states is valid (th_scheduler.h), with the
// clients of ABI 1.3 and the draft grants of 1.4, and as a 1.2 host fills the state and the decision
// (no clients, no drafts), and a scheduler with room runs something.
#include <set>

#include "conformance/conformance.hpp"

namespace tokenhost::conformance {
namespace {

struct State {
  std::vector<th_sched_seq> seqs;
  std::vector<uint32_t> clients;  // th_sched_state.seq_clients (ABI 1.3)
  std::vector<uint32_t> drafts;   // th_sched_state.seq_draft (ABI 1.4)
  std::vector<uint32_t> cached;   // th_sched_state.seq_cached (ABI 1.5)
  th_sched_state state{};
  bool older_decision = false;    // the decision as a host before 1.4 fills it: no run_draft
};

// A consistent random engine state: preempted sequences hold no blocks, waiting ones none or (ABI 1.5)
// the whole blocks of a cached prefix, running ones the blocks of what they prefilled; the free blocks
// are what they leave.
State random_state(Rng& rng, bool nothing_running) {
  State s;
  const uint32_t bs = std::vector<uint32_t>{1, 8, 16}[uniform(rng, 0, 2)];
  const uint32_t total = uniform(rng, 16, 256);
  uint32_t used = 0;
  const uint32_t n = uniform(rng, nothing_running ? 1 : 0, 24);
  for (uint32_t i = 0; i < n; ++i) {
    th_sched_seq q{};
    q.seq_id = 1000 + uint64_t(i) * 7;
    q.state = nothing_running ? TH_SEQ_WAITING : th_seq_state(uniform(rng, 0, 2));
    q.priority = int32_t(uniform(rng, 0, 2));
    q.arrival_ns = 1'000'000ull * i;
    q.prompt_len = uniform(rng, 1, 300);
    q.max_new_tokens = uniform(rng, 1, 64);
    if (q.state == TH_SEQ_RUNNING) {
      q.prefilled = uniform(rng, 1, q.prompt_len);
      q.generated = q.prefilled == q.prompt_len ? uniform(rng, 0, q.max_new_tokens - 1) : 0;
      q.kv_blocks = (q.prefilled + q.generated + bs - 1) / bs;
      if (used + q.kv_blocks > total) {
        q.state = TH_SEQ_WAITING;
        q.prefilled = q.generated = q.kv_blocks = 0;
      }
      used += q.kv_blocks;
    } else if (q.state == TH_SEQ_WAITING && uniform(rng, 0, 2) == 0) {
      const uint32_t blocks = uniform(rng, 0, (q.prompt_len - 1) / bs);  // the last prompt token is computed
      if (used + blocks <= total) {
        q.prefilled = blocks * bs;
        q.kv_blocks = blocks;
        used += blocks;
      }
    }
    s.cached.push_back(q.state == TH_SEQ_WAITING ? q.prefilled : 0);
    s.seqs.push_back(q);
    // Decoding sequences that generated before may take a draft (as the engine offers them).
    const bool decoding = q.state == TH_SEQ_RUNNING && q.prefilled == q.prompt_len && q.generated > 0;
    s.drafts.push_back(decoding ? uniform(rng, 0, 4) : 0);
    // A few clients with sparse numbers, as the host gives them.
    s.clients.push_back(std::vector<uint32_t>{1, 7, 42, 100000}[uniform(rng, 0, 3)]);
  }
  s.state.struct_size = sizeof s.state;
  s.state.seqs = s.seqs.data();
  s.state.seq_clients = s.clients.data();
  s.state.seq_draft = s.drafts.data();
  s.state.seq_cached = s.cached.data();
  s.state.n_seqs = uint32_t(s.seqs.size());
  s.state.total_kv_blocks = total;
  s.state.free_kv_blocks = total - used;
  s.state.block_size = bs;
  s.state.max_step_tokens = uniform(rng, 1, 512);
  s.state.max_step_seqs = uniform(rng, 1, 32);
  s.state.now_ns = 1'000'000ull * 100;
  return s;
}

struct Decision {
  std::vector<th_sched_item> run;
  std::vector<uint64_t> preempt;
  std::vector<uint32_t> drafts;  // run_draft, parallel to run (ABI 1.4)
  bool grants = false;           // the plugin (1.4 or later) writes run_draft
};

Decision decide(PluginInstance& inst, const State& s) {
  Decision d;
  d.run.resize(s.seqs.size());
  d.preempt.resize(s.seqs.size());
  // The host zeroes run_draft; as an older host, it passes a decision that ends before it, and the
  // array beside it (a canary) must stay untouched.
  constexpr uint32_t kCanary = 0xC0FFEEu;
  d.drafts.assign(s.seqs.size(), s.older_decision ? kCanary : 0);
  th_sched_decision out{sizeof out, d.run.data(), 0, d.preempt.data(), 0, d.drafts.data()};
  if (s.older_decision) out.struct_size = uint32_t(TH_SIZE_THROUGH(th_sched_decision, n_preempt));
  th_error err;
  const th_status st = inst.call(&th_scheduler_vtable::schedule, "schedule", inst.handle(), &s.state, &out, &err);
  expect(st == TH_OK, "schedule() returned " + std::to_string(st) + ": " + err.text());
  expect(out.n_run <= s.seqs.size() && out.n_preempt <= s.seqs.size(),
         "schedule() wrote " + std::to_string(out.n_run) + " runs and " + std::to_string(out.n_preempt) +
             " preemptions for " + std::to_string(s.seqs.size()) + " sequences");
  if (s.older_decision)
    for (uint32_t v : d.drafts) expect(v == kCanary, "wrote run_draft into a decision whose struct_size ends before it");
  d.run.resize(out.n_run);
  d.preempt.resize(out.n_preempt);
  d.drafts.resize(out.n_run);
  d.grants = !s.older_decision && inst.library().abi_minor() >= 4;
  return d;
}

void check_valid(const State& s, const Decision& d) {
  auto find = [&](uint64_t id) -> const th_sched_seq* {
    for (const auto& q : s.seqs)
      if (q.seq_id == id) return &q;
    return nullptr;
  };
  std::set<uint64_t> preempted;
  for (uint64_t id : d.preempt) {
    const th_sched_seq* q = find(id);
    expect(q != nullptr && q->state == TH_SEQ_RUNNING, "preempts sequence " + std::to_string(id) + ", which is not running");
    expect(preempted.insert(id).second, "preempts sequence " + std::to_string(id) + " twice");
  }
  std::set<uint64_t> seen;
  uint64_t tokens = 0;
  for (size_t k = 0; k < d.run.size(); ++k) {
    const auto& item = d.run[k];
    const th_sched_seq* q = find(item.seq_id);
    const std::string which = "sequence " + std::to_string(item.seq_id);
    expect(q != nullptr, "runs unknown " + which);
    expect(seen.insert(item.seq_id).second, "runs " + which + " twice");
    // A preempted sequence starts over: its prompt is to prefill again.
    const uint32_t prefilled = preempted.count(item.seq_id) || q->state != TH_SEQ_RUNNING ? 0 : q->prefilled;
    if (prefilled < q->prompt_len) {
      expect(item.n_tokens >= 1 && item.n_tokens <= q->prompt_len - prefilled,
             "gives " + which + " " + std::to_string(item.n_tokens) + " prefill tokens; " +
                 std::to_string(q->prompt_len - prefilled) + " remain of its prompt");
    } else {
      expect(item.n_tokens == 1, "gives decoding " + which + " " + std::to_string(item.n_tokens) + " tokens (a decode is 1)");
    }
    tokens += item.n_tokens;
    if (d.grants) {
      // Drafts only for a decoding sequence, within what the state offers it (none once preempted).
      const size_t i = size_t(q - s.seqs.data());
      const uint32_t offered = preempted.count(item.seq_id) || s.state.seq_draft == nullptr ? 0 : s.drafts[i];
      expect(d.drafts[k] <= offered, "grants " + which + " " + std::to_string(d.drafts[k]) + " draft tokens; it offers " +
                                         std::to_string(offered));
      tokens += d.drafts[k];
    }
  }
  expect(tokens <= s.state.max_step_tokens, "runs " + std::to_string(tokens) + " tokens (draft tokens included), over max_step_tokens " +
                                                std::to_string(s.state.max_step_tokens));
  expect(d.run.size() <= s.state.max_step_seqs, "runs " + std::to_string(d.run.size()) + " sequences, over max_step_seqs " +
                                                    std::to_string(s.state.max_step_seqs));
}

}  // namespace

void scheduler_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  std::string why;
  auto inst = instance_for(catalog, plugin, model_shape(4, 2, 16, TH_DTYPE_F16), why);
  if (!inst) {
    r.not_applicable("scheduler.decision_valid", "check() refuses the model: " + why);
    r.not_applicable("scheduler.makes_progress", "check() refuses the model: " + why);
    r.not_applicable("scheduler.older_host_state", "check() refuses the model: " + why);
    return;
  }
  r.rule("scheduler.decision_valid", [&] {
    for (uint32_t round = 0; round < 20 * o.rounds; ++round) {
      const State s = random_state(rng, false);
      check_valid(s, decide(*inst, s));
    }
  });
  r.rule("scheduler.older_host_state", [&] {
    // A 1.2 host's state ends at now_ns: a plugin must not read seq_clients nor seq_draft (TH_HAS_MEMBER),
    // and decides as for one client. The pointers are NULL here: reading one anyway crashes the run. Its
    // decision ends before run_draft, which must not be written.
    for (uint32_t round = 0; round < 4 * o.rounds; ++round) {
      State s = random_state(rng, false);
      s.state.struct_size = uint32_t(TH_SIZE_THROUGH(th_sched_state, now_ns));
      s.state.seq_clients = nullptr;
      s.state.seq_draft = nullptr;
      s.state.seq_cached = nullptr;
      for (auto& q : s.seqs)  // nor does it hold cached prefixes for waiting sequences
        if (q.state == TH_SEQ_WAITING && q.kv_blocks > 0) s.state.free_kv_blocks += q.kv_blocks, q.prefilled = q.kv_blocks = 0;
      s.older_decision = true;
      check_valid(s, decide(*inst, s));
    }
  });
  r.rule("scheduler.makes_progress", [&] {
    // Nothing runs, a sequence waits whose first token fits every budget: a decision that runs nothing
    // would leave the engine waiting forever.
    for (uint32_t round = 0; round < 4 * o.rounds; ++round) {
      State s = random_state(rng, true);
      // Small requests that fit whole (prompt and every new token) in the pool and the step budget, so
      // that schedulers that reserve a request's blocks up front can admit them too.
      for (auto& q : s.seqs) {
        q.prompt_len = uniform(rng, 1, 16);
        q.max_new_tokens = uniform(rng, 1, 16);
      }
      s.state.total_kv_blocks = s.state.free_kv_blocks = std::max(s.state.total_kv_blocks, 64u);
      s.state.max_step_tokens = std::max(s.state.max_step_tokens, 16u);
      const Decision d = decide(*inst, s);
      check_valid(s, d);
      expect(!d.run.empty(), std::to_string(s.seqs.size()) + " sequences wait, nothing runs, all " +
                                 std::to_string(s.state.total_kv_blocks) + " blocks are free, and the decision runs none");
    }
  });
}

}  // namespace tokenhost::conformance
