// scheduler.continuous: iteration-level continuous batching with priorities, chunked prefill mixed
// with decodes, and preemption by recompute.
//
// Each step walks every sequence in rank order: priority high to low; within a priority, running
// sequences, then preempted ones, then waiting ones; within those, arrival order. Running sequences
// get one decode token or a prefill chunk; waiting and preempted ones are admitted with a prefill
// chunk while the budgets and blocks allow, stopping at the first that cannot be (no overtaking).
// Token budget and sequence slots go to decodes first: a prefill chunk only takes what the running
// decodes ranked after it leave. When blocks run short, a running sequence preempts running
// sequences ranked below it (lowest priority, latest arrival first), a waiting one those of a lower
// priority (config preempt_for_priority), and only when the preemptions make its chunk fit.
//
// Fair share (config fair_share, ABI 1.3's client of each sequence): within a priority, a client's
// k-th sequence ranks with the other clients' k-th ones (its tier), before any client's (k+1)-th, so a
// client with 256 sequences and a client with one take turns: the one sequence is in the first tier.
// A sequence's budget reservation counts only the decodes ranked after it that are its client's own or
// of its tier or a lower one, and a waiting sequence may preempt other clients' sequences of higher
// tiers for its blocks. With one client the tiers are the rank order itself: nothing changes.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_sched.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

struct Config {
  uint32_t max_chunk;
  bool preempt_for_priority;
  uint32_t prefill_with_decodes;  // prompt tokens a step takes while sequences decode; 0: no cap
  bool fair_share;
};

Config read_config(const th_config* config) {
  const sdk::Config c(config);
  return Config{uint32_t(c.require_int("max_prefill_chunk")), c.require_bool("preempt_for_priority"),
                uint32_t(c.require_int("max_prefill_tokens_with_decodes")), c.require_bool("fair_share")};
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "scheduler.continuous: check() got NULL");
    read_config(query->config);  // any model, any device
  });
}

int state_class(th_seq_state state) {
  switch (state) {
    case TH_SEQ_RUNNING: return 0;
    case TH_SEQ_PREEMPTED: return 1;
    default: return 2;
  }
}

class Plan {
 public:
  Plan(sdk::SchedStep& step, const Config& config) : step_(step), config_(config), tier_(step.size(), 0) {
    for (uint32_t i = 0; i < step.size(); ++i) {
      const th_sched_seq& s = step.seq(i);
      if (s.state == TH_SEQ_RUNNING || sdk::is_waiting_or_preempted(s)) order_.push_back(i);
    }
    auto by_state_then_arrival = [&](uint32_t a, uint32_t b) {
      const th_sched_seq& x = step.seq(a);
      const th_sched_seq& y = step.seq(b);
      if (state_class(x.state) != state_class(y.state)) return state_class(x.state) < state_class(y.state);
      return x.arrival_ns < y.arrival_ns;
    };
    if (config.fair_share) {
      // Tiers: each sequence's place among its client's own (same priority), in the order below.
      std::vector<uint32_t> within = order_;
      std::stable_sort(within.begin(), within.end(), by_state_then_arrival);
      std::map<std::pair<int32_t, uint32_t>, uint32_t> counts;  // (priority, client) -> sequences so far
      for (uint32_t i : within) tier_[i] = counts[{step.seq(i).priority, step.client(i)}]++;
    }
    std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
      const th_sched_seq& x = step.seq(a);
      const th_sched_seq& y = step.seq(b);
      if (x.priority != y.priority) return x.priority > y.priority;
      if (tier_[a] != tier_[b]) return tier_[a] < tier_[b];
      return by_state_then_arrival(a, b);
    });
  }

  void decide() {
    // A running sequence that can never produce its next token, even alone in the pool, gives its
    // blocks back now; it is never admitted again, and the engine fails it once nothing else runs.
    for (uint32_t i : order_) {
      if (step_.running(i) && sdk::never_fits(step_.state(), step_.seq(i))) step_.preempt(i);
    }
    for (uint32_t i : order_) {
      if (step_.undecided_running(i) && sdk::is_decoding(step_.seq(i))) ++decodes_left_;
    }
    // A step's time grows with its prefill tokens, and every decoding sequence waits for the whole
    // step: capping them while sequences decode bounds the inter-token latency.
    if (decodes_left_ > 0 && config_.prefill_with_decodes > 0) prefill_left_ = config_.prefill_with_decodes;
    for (size_t p = 0; p < order_.size(); ++p) {
      const uint32_t i = order_[p];
      if (step_.decided(i)) continue;
      const th_sched_seq& s = step_.seq(i);
      if (s.state == TH_SEQ_RUNNING) {
        decide_running(p);
      } else if (admitting_) {
        admit(p);
      }
    }
    // Nothing runs while sequences still hold blocks: the engine would wait for a step that never
    // comes. The top-ranked running sequence then takes what it needs from all the others.
    if (step_.n_run() == 0) force_top_running();
    // Speculative decoding's draft tokens take only what every placement left of the budget.
    step_.grant_drafts();
    step_.order_decodes_first();
  }

 private:
  void decide_running(size_t p) {
    const uint32_t i = order_[p];
    if (sdk::is_decoding(step_.seq(i))) {
      --decodes_left_;
      if (!step_.has_budget()) return;
      place(i, 1, victims_below(p, all), true);
      return;
    }
    const uint32_t tokens = prefill_tokens(p), slots = spare(step_.seqs_left(), p);
    if (tokens == 0 || slots == 0) return;
    const uint32_t before = step_.tokens_left();
    place(i, step_.step_tokens(i, config_.max_chunk, tokens), victims_below(p, all), true);
    prefill_left_ -= before - step_.tokens_left();
  }

  void admit(size_t p) {
    const uint32_t i = order_[p];
    const th_sched_seq& s = step_.seq(i);
    if (sdk::never_fits(step_.state(), s)) return;  // not worth holding anyone back for
    // A victim of this priority or higher was preempted in this step: it gets its blocks back first.
    if (int64_t(s.priority) <= admit_floor_) {
      admitting_ = false;
      return;
    }
    const uint32_t tokens = prefill_tokens(p), slots = spare(step_.seqs_left(), p);
    if (tokens == 0 || slots == 0) {
      admitting_ = false;
      return;
    }
    std::vector<uint32_t> victims;
    if (config_.preempt_for_priority || config_.fair_share) {
      victims = victims_below(p, [&](uint32_t v) {
        return (config_.preempt_for_priority && step_.seq(v).priority < s.priority) || ahead_of(i, v);
      });
      // Preempt only for a sequence whose whole prompt then fits in what it can take: otherwise it
      // would hold blocks it cannot finish with.
      uint64_t reachable = step_.free_blocks();
      for (uint32_t v : victims) reachable += step_.seq(v).kv_blocks;
      if (sdk::kv_blocks_for(sdk::next_token_positions(s), step_.state().block_size) > reachable) victims.clear();
    }
    const uint32_t before = step_.tokens_left();
    if (!place(i, step_.step_tokens(i, config_.max_chunk, tokens), victims, false)) admitting_ = false;
    prefill_left_ -= before - step_.tokens_left();
  }

  // Runs sequence i with n tokens, or with fewer when only fewer fit the free blocks. Preempts the
  // shortest prefix of victims that makes all n fit, none when all of them would not; with least_one,
  // when not one token fits otherwise, the shortest prefix that makes one fit. Returns whether i runs.
  bool place(uint32_t i, uint32_t n, const std::vector<uint32_t>& victims, bool least_one) {
    if (step_.fit_tokens(i, n) == n) {
      step_.run(i, n);
      return true;
    }
    int64_t k = step_.victims_for(step_.blocks_needed(i, n), victims);
    if (k < 0 && least_one && step_.fit_tokens(i, n) == 0) k = step_.victims_for(step_.blocks_needed(i, 1), victims);
    for (int64_t j = 0; j < k; ++j) preempt(victims[size_t(j)]);
    const uint32_t m = step_.fit_tokens(i, n);
    if (m == 0) return false;
    step_.run(i, m);
    return true;
  }

  void preempt(uint32_t i) {
    const th_sched_seq& s = step_.seq(i);
    if (sdk::is_decoding(s)) --decodes_left_;
    admit_floor_ = std::max<int64_t>(admit_floor_, s.priority);
    step_.preempt(i);
  }

  // Undecided running sequences ranked after position p that match keep (given a state index), lowest
  // rank first.
  template <class Keep>
  std::vector<uint32_t> victims_below(size_t p, Keep keep) const {
    std::vector<uint32_t> out;
    for (size_t q = order_.size(); q-- > p + 1;) {
      const uint32_t j = order_[q];
      if (step_.undecided_running(j) && keep(j)) out.push_back(j);
    }
    return out;
  }

  static bool all(uint32_t) { return true; }

  // Fair share: sequence v is another client's, of a higher tier than i's, and gives way to it.
  bool ahead_of(uint32_t i, uint32_t v) const {
    return config_.fair_share && step_.client(v) != step_.client(i) && tier_[v] > tier_[i] &&
           step_.seq(v).priority <= step_.seq(i).priority;
  }

  // Undecided running decodes ranked after position p whose token and slot the sequence at p leaves
  // them: all of them, or with fair share those not ahead_of it.
  uint32_t reserved(size_t p) const {
    if (!config_.fair_share) return decodes_left_;
    uint32_t n = 0;
    for (size_t q = p + 1; q < order_.size(); ++q) {
      const uint32_t j = order_[q];
      if (step_.undecided_running(j) && sdk::is_decoding(step_.seq(j)) && !ahead_of(order_[p], j)) ++n;
    }
    return n;
  }
  // What a prefill at position p may take of `left` once the decodes it leaves theirs have them.
  uint32_t spare(uint32_t left, size_t p) const {
    const uint32_t r = reserved(p);
    return left > r ? left - r : 0;
  }
  // Prompt tokens the prefill chunk at position p may take.
  uint32_t prefill_tokens(size_t p) const { return std::min(spare(step_.tokens_left(), p), prefill_left_); }

  void force_top_running() {
    for (size_t p = 0; p < order_.size(); ++p) {
      const uint32_t i = order_[p];
      if (!step_.undecided_running(i)) continue;
      if (!step_.has_budget()) return;
      const uint32_t n = step_.step_tokens(i, config_.max_chunk);
      if (place(i, n, victims_below(p, all), true)) return;
      // Not even the whole pool holds it (blocks the engine does not show are in use): preempt every
      // running sequence, so that the engine, with nothing running, fails its oldest request.
      for (size_t q = p; q < order_.size(); ++q) {
        if (step_.undecided_running(order_[q])) preempt(order_[q]);
      }
      return;
    }
  }

  sdk::SchedStep& step_;
  const Config& config_;
  std::vector<uint32_t> order_;  // state indices in rank order
  std::vector<uint32_t> tier_;   // by state index: its place among its client's sequences (fair share)
  uint32_t decodes_left_ = 0;    // undecided running decodes not yet reached
  bool admitting_ = true;
  uint32_t prefill_left_ = std::numeric_limits<uint32_t>::max();  // config prefill_with_decodes
  int64_t admit_floor_ = std::numeric_limits<int64_t>::min();
};

struct Continuous {
  explicit Continuous(const th_create_args& args) : config(read_config(args.config)) {}
  Config config;
};

th_status schedule(th_instance* instance, const th_sched_state* state, th_sched_decision* decision,
                   th_error* err) {
  return sdk::guard(err, [&] {
    sdk::check_schedule_args("scheduler.continuous", state, decision);
    sdk::SchedStep step(*state, *decision);
    Plan(step, sdk::self<Continuous>(instance).config).decide();
  });
}

const th_scheduler_vtable kVtable = {
    sizeof(th_scheduler_vtable), sdk::create_instance<Continuous>, sdk::destroy_instance<Continuous>, check, schedule,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SCHEDULER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
