// Test helpers for scheduler plugins: an instance wrapper, states, the invariants every decision must
// keep, and a small simulation that plays the engine (host/actors/engine.cpp) against a plugin.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "harness.hpp"

namespace tokenhost::testing {

struct SchedDecision {
  std::vector<th_sched_item> run;
  std::vector<uint64_t> preempt;
};

// A scheduler plugin instance made through the real loader.
struct Scheduler {
  std::string id;
  std::shared_ptr<PluginInstance> inst;
  Scheduler(const std::string& plugin_id, const toml::table& config)
      : id(plugin_id), inst(make_plugin(plugin_id, model_spec(), config)) {}

  SchedDecision schedule(const th_sched_state& state) {
    std::vector<th_sched_item> run(state.n_seqs, th_sched_item{~0ull, 0});
    std::vector<uint64_t> preempt(state.n_seqs, ~0ull);
    th_sched_decision d{sizeof(th_sched_decision), run.data(), 12345, preempt.data(), 12345, nullptr};
    th_error err;
    const th_status st = inst->vtable<th_scheduler_vtable>().schedule(inst->handle(), &state, &d, &err);
    INFO(id << " schedule(): " << err.text());
    REQUIRE(st == TH_OK);
    REQUIRE(d.n_run <= state.n_seqs);
    REQUIRE(d.n_preempt <= state.n_seqs);
    run.resize(d.n_run);
    preempt.resize(d.n_preempt);
    return {run, preempt};
  }
};

inline uint64_t sched_div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// A state whose pool holds the sequences' blocks plus free_blocks.
inline th_sched_state sched_state(const std::vector<th_sched_seq>& seqs, uint32_t free_blocks, uint32_t block_size,
                                  uint32_t max_tokens, uint32_t max_seqs) {
  uint32_t held = 0;
  for (const auto& s : seqs) held += s.kv_blocks;
  return th_sched_state{sizeof(th_sched_state), seqs.data(), uint32_t(seqs.size()), held + free_blocks, free_blocks,
                        block_size, max_tokens, max_seqs, 1000, nullptr, nullptr, nullptr};
}

// The invariants every scheduler's decision keeps, whatever the state: known ids listed once (run or
// preempted), only running sequences preempted, budgets kept, decodes of one token, prefill chunks
// within the prompt left and max_chunk, and the blocks needed within the free blocks plus the blocks
// of the preempted sequences.
inline void check_sched_decision(const th_sched_state& st, uint32_t max_chunk, const SchedDecision& d) {
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < st.n_seqs; ++i) index[st.seqs[i].seq_id] = i;
  REQUIRE(d.run.size() <= st.max_step_seqs);
  uint64_t tokens = 0, need = 0, freed = 0;
  std::set<uint64_t> listed;
  for (const th_sched_item& item : d.run) {
    INFO("run seq " << item.seq_id << " n_tokens " << item.n_tokens);
    REQUIRE(index.count(item.seq_id) == 1);
    REQUIRE(listed.insert(item.seq_id).second);
    const th_sched_seq& s = st.seqs[index[item.seq_id]];
    REQUIRE((s.state == TH_SEQ_RUNNING || s.state == TH_SEQ_WAITING || s.state == TH_SEQ_PREEMPTED));
    REQUIRE(item.n_tokens >= 1);
    if (s.prefilled < s.prompt_len) {
      REQUIRE(item.n_tokens <= s.prompt_len - s.prefilled);
      REQUIRE(item.n_tokens <= max_chunk);
    } else {
      REQUIRE(item.n_tokens == 1);
    }
    tokens += item.n_tokens;
    const uint64_t blocks = sched_div_up(uint64_t(s.prefilled) + item.n_tokens, st.block_size);
    need += blocks > s.kv_blocks ? blocks - s.kv_blocks : 0;
  }
  REQUIRE(tokens <= st.max_step_tokens);
  for (uint64_t id : d.preempt) {
    INFO("preempted seq " << id);
    REQUIRE(index.count(id) == 1);
    REQUIRE(listed.insert(id).second);
    const th_sched_seq& s = st.seqs[index[id]];
    REQUIRE(s.state == TH_SEQ_RUNNING);
    freed += s.kv_blocks;
  }
  REQUIRE(need <= uint64_t(st.free_kv_blocks) + freed);
}

// A random state: up to 20 sequences, running (prefilling or decoding), waiting or preempted, with
// random priorities when `priorities`, and a pool from nearly full to roomy.
template <class Rng>
std::vector<th_sched_seq> random_sched_seqs(Rng& rng, uint32_t block_size, bool priorities) {
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  std::vector<th_sched_seq> seqs;
  const uint32_t n = u(1, 20);
  for (uint32_t i = 0; i < n; ++i) {
    const th_seq_state state = th_seq_state(u(0, 2));
    const int32_t priority = priorities ? int32_t(u(0, 3)) - 1 : 0;
    const uint32_t prompt = u(1, 200);
    const uint32_t max_new = u(1, 64);
    if (state == TH_SEQ_RUNNING) {
      const bool decoding = prompt == 1 || u(0, 1) == 1;
      const uint32_t generated = decoding ? u(1, max_new) : 0;
      const uint32_t prompt_len = decoding ? prompt + generated - 1 : prompt;
      const uint32_t prefilled = decoding ? prompt_len : u(1, prompt - 1);
      const uint32_t blocks = uint32_t(sched_div_up(prefilled, block_size));
      seqs.push_back(th_sched_seq{1000 + i, state, priority, i, prompt_len, prefilled, generated, max_new, blocks});
    } else {
      const uint32_t generated = state == TH_SEQ_PREEMPTED && u(0, 1) ? u(1, max_new) : 0;
      const uint32_t prompt_len = generated > 0 ? prompt + generated - 1 : prompt;
      seqs.push_back(th_sched_seq{1000 + i, state, priority, i, prompt_len, 0, generated, max_new, 0});
    }
  }
  return seqs;
}

// ---- The simulation: the engine's bookkeeping (engine.cpp) on a fake state. ----

struct SimRequest {
  uint64_t arrival_step;
  int32_t priority;
  uint32_t prompt;
  uint32_t max_new;
  uint32_t client = 0;  // th_sched_state.seq_clients
};

struct SimConfig {
  uint32_t total_blocks = 64;
  uint32_t block_size = 16;
  uint32_t max_step_tokens = 256;
  uint32_t max_step_seqs = 16;
  uint32_t max_chunk = 256;  // the plugin's max_prefill_chunk, for the invariant check
  uint64_t step_bound = 100000;
};

// A random engine: a pool of min_positions..max_positions token positions in blocks of 1, 4 or 16,
// tight or roomy step budgets, short or default prefill chunks.
template <class Rng>
SimConfig random_sim_config(Rng& rng, uint32_t min_positions, uint32_t max_positions) {
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  SimConfig cfg;
  cfg.block_size = std::vector<uint32_t>{1, 4, 16}[u(0, 2)];
  cfg.total_blocks = u(min_positions, max_positions) / cfg.block_size;
  cfg.max_step_tokens = u(1, 3) == 1 ? u(1, 8) : u(16, 512);
  cfg.max_step_seqs = u(1, 16);
  cfg.max_chunk = u(1, 2) == 1 ? u(1, 32) : 256;
  return cfg;
}

struct SimResult {
  uint64_t steps = 0;                         // engine steps run (decisions with a non-empty run list)
  uint64_t clock = 0;                         // the step clock when the last request ended
  uint64_t preemptions = 0;
  std::map<uint64_t, uint64_t> first_token_at;  // request index -> clock of its first token
  std::map<uint64_t, uint64_t> finished_at;   // request index -> clock of its last token
  std::vector<uint64_t> failed;               // request indices the engine failed
};

// Plays the engine: requests arrive on a step clock (requests sorted by arrival_step); each step the
// plugin decides, the decision is checked, preemptions reset prefilled, run items advance prefilled
// and sample a token when they reach the end of their tokens, and a request finishes at max_new
// tokens. An empty run list with nothing running fails the oldest request (as the engine does); an
// empty run list while sequences run would stall the engine and fails the test. The clock must stay
// under step_bound.
inline SimResult simulate(Scheduler& sched, const std::vector<SimRequest>& requests, const SimConfig& cfg) {
  struct Live {
    size_t request;
    uint32_t prefilled = 0, generated = 0;
    th_seq_state state = TH_SEQ_WAITING;
  };
  SimResult out;
  std::vector<Live> live;
  size_t next = 0;
  uint64_t clock = 0;
  auto tokens = [&](const Live& q) { return requests[q.request].prompt + q.generated; };
  auto prompt_len = [&](const Live& q) { return q.generated == 0 ? tokens(q) : tokens(q) - 1; };
  auto blocks = [&](uint64_t positions) { return uint32_t(sched_div_up(positions, cfg.block_size)); };
  while (next < requests.size() || !live.empty()) {
    while (next < requests.size() && requests[next].arrival_step <= clock) live.push_back(Live{next++});
    if (live.empty()) {
      clock = requests[next].arrival_step;
      continue;
    }
    INFO(sched.id << " at clock " << clock << " with " << live.size() << " live sequences");
    REQUIRE(clock < cfg.step_bound);
    std::vector<th_sched_seq> view;
    std::vector<uint32_t> clients;
    uint32_t held = 0;
    for (const Live& q : live) {
      const SimRequest& r = requests[q.request];
      view.push_back(th_sched_seq{q.request, q.state, r.priority, r.arrival_step, prompt_len(q), q.prefilled,
                                  q.generated, r.max_new, blocks(q.prefilled)});
      clients.push_back(r.client);
      held += blocks(q.prefilled);
    }
    REQUIRE(held <= cfg.total_blocks);
    const th_sched_state st{sizeof(th_sched_state), view.data(), uint32_t(view.size()), cfg.total_blocks,
                            cfg.total_blocks - held, cfg.block_size, cfg.max_step_tokens, cfg.max_step_seqs, clock,
                            clients.data(), nullptr, nullptr};
    const SchedDecision d = sched.schedule(st);
    check_sched_decision(st, cfg.max_chunk, d);
    auto find = [&](uint64_t id) {
      return std::find_if(live.begin(), live.end(), [&](const Live& q) { return q.request == id; });
    };
    for (uint64_t id : d.preempt) {
      auto q = find(id);
      q->state = TH_SEQ_PREEMPTED;
      q->prefilled = 0;
      ++out.preemptions;
    }
    if (d.run.empty()) {
      const bool any_running = std::any_of(live.begin(), live.end(), [](const Live& q) { return q.state == TH_SEQ_RUNNING; });
      INFO("empty run list");
      REQUIRE_FALSE(any_running);  // the engine would wait forever
      out.failed.push_back(live.front().request);
      live.erase(live.begin());
      ++clock;
      continue;
    }
    for (const th_sched_item& item : d.run) {
      auto q = find(item.seq_id);
      REQUIRE(item.n_tokens <= tokens(*q) - q->prefilled);
      q->prefilled += item.n_tokens;
      q->state = TH_SEQ_RUNNING;
      if (q->prefilled == tokens(*q)) {
        if (q->generated == 0 && !out.first_token_at.count(q->request)) out.first_token_at[q->request] = clock + 1;
        ++q->generated;
      }
    }
    uint32_t used = 0;
    for (const Live& q : live) used += blocks(q.prefilled);
    REQUIRE(used <= cfg.total_blocks);  // the worker would answer kv_exhausted
    ++out.steps;
    ++clock;
    for (auto it = live.begin(); it != live.end();) {
      if (it->generated >= requests[it->request].max_new) {
        out.finished_at[it->request] = clock;
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  out.clock = clock;
  return out;
}

// Random requests: n of them, arriving `spread` steps apart on average, each fitting the pool alone.
template <class Rng>
std::vector<SimRequest> random_requests(Rng& rng, uint32_t n, uint32_t spread, const SimConfig& cfg, bool priorities) {
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  const uint32_t capacity = cfg.total_blocks * cfg.block_size;
  std::vector<SimRequest> out;
  uint64_t step = 0;
  for (uint32_t i = 0; i < n; ++i) {
    step += spread == 0 ? 0 : u(0, 2 * spread);
    const uint32_t prompt = u(1, std::min<uint32_t>(capacity / 2, 300));
    const uint32_t max_new = u(1, std::min<uint32_t>(capacity - prompt, 80));
    out.push_back(SimRequest{step, priorities ? int32_t(u(0, 2)) : 0, prompt, max_new});
  }
  return out;
}

// A generous bound on the clock for requests that all fit: serially, every request needs at most
// prompt + max_new steps; preemption recomputes add to that, but not without bound.
inline uint64_t sim_step_bound(const std::vector<SimRequest>& requests) {
  uint64_t work = 0;
  for (const auto& r : requests) work += r.prompt + r.max_new;
  return (requests.empty() ? 0 : requests.back().arrival_step) + 4 * work + 100;
}

}  // namespace tokenhost::testing
