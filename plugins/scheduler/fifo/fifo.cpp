// scheduler.fifo: first come, first served continuous batching with chunked prefill.
//
// Each step: running sequences first, in arrival order (a prefill chunk or one decode token each),
// preempting the most recently arrived running sequence when KV blocks run short; then waiting and
// preempted sequences, in arrival order, while the budgets and free blocks allow, with no overtaking.
#include <tokenhost/plugin.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

uint32_t read_chunk(const th_config* config) {
  return uint32_t(sdk::Config(config).get_int_in("max_prefill_chunk", 256, 1, 65536));
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "scheduler.fifo: check() got NULL");
    read_chunk(query->config);  // any model, any device
  });
}

// One schedule() call: the budgets left and what has been decided so far.
class Step {
 public:
  Step(const th_sched_state& state, uint32_t max_chunk, th_sched_decision& decision)
      : state_(state),
        max_chunk_(max_chunk),
        decision_(decision),
        tokens_left_(state.max_step_tokens),
        seqs_left_(state.max_step_seqs),
        free_blocks_(state.free_kv_blocks),
        done_(state.n_seqs, false) {
    decision_.n_run = 0;
    decision_.n_preempt = 0;
  }

  void run_running() {
    for (uint32_t i = 0; i < state_.n_seqs; ++i) {
      if (state_.seqs[i].state != TH_SEQ_RUNNING || done_[i]) continue;
      if (tokens_left_ == 0 || seqs_left_ == 0) return;
      const uint32_t n = step_tokens(state_.seqs[i]);
      // Preempt the latest arrived running sequence not yet decided until this one fits.
      while (blocks_needed(state_.seqs[i], n) > free_blocks_) {
        const uint32_t victim = latest_undecided_running();
        preempt(victim);
        if (victim == i) break;
      }
      if (!done_[i]) add_run(i, n);
    }
  }

  // No admission in a step that had to preempt: the preempted sequences arrived earlier and get the
  // blocks back first (no overtaking).
  void admit_waiting() {
    if (decision_.n_preempt > 0) return;
    for (uint32_t i = 0; i < state_.n_seqs; ++i) {
      const th_sched_seq& seq = state_.seqs[i];
      if (seq.state != TH_SEQ_WAITING && seq.state != TH_SEQ_PREEMPTED) continue;
      if (tokens_left_ == 0 || seqs_left_ == 0) return;
      const uint32_t n = step_tokens(seq);
      if (blocks_needed(seq, n) > free_blocks_) return;
      add_run(i, n);
    }
  }

 private:
  // A prefill chunk while the prompt is not all in the cache, else one decode token.
  uint32_t step_tokens(const th_sched_seq& seq) const {
    if (seq.prefilled >= seq.prompt_len) return 1;
    return std::min({seq.prompt_len - seq.prefilled, max_chunk_, tokens_left_});
  }

  uint64_t blocks_needed(const th_sched_seq& seq, uint32_t n) const {
    const uint64_t bs = std::max<uint32_t>(state_.block_size, 1);
    const uint64_t blocks = (uint64_t(seq.prefilled) + n + bs - 1) / bs;
    return blocks > seq.kv_blocks ? blocks - seq.kv_blocks : 0;
  }

  uint32_t latest_undecided_running() const {
    for (uint32_t j = state_.n_seqs; j-- > 0;) {
      if (state_.seqs[j].state == TH_SEQ_RUNNING && !done_[j]) return j;
    }
    throw Error(TH_ERR_INTERNAL, "scheduler.fifo: no running sequence left to preempt");
  }

  void add_run(uint32_t i, uint32_t n) {
    decision_.run[decision_.n_run++] = th_sched_item{state_.seqs[i].seq_id, n};
    done_[i] = true;
    tokens_left_ -= n;
    seqs_left_ -= 1;
    free_blocks_ -= blocks_needed(state_.seqs[i], n);
  }

  void preempt(uint32_t i) {
    decision_.preempt[decision_.n_preempt++] = state_.seqs[i].seq_id;
    done_[i] = true;
    free_blocks_ += state_.seqs[i].kv_blocks;
  }

  const th_sched_state& state_;
  const uint32_t max_chunk_;
  th_sched_decision& decision_;
  uint32_t tokens_left_;
  uint32_t seqs_left_;
  uint64_t free_blocks_;
  std::vector<bool> done_;  // run or preempted in this step
};

struct Fifo {
  explicit Fifo(const th_create_args& args) : max_chunk(read_chunk(args.config)) {}
  uint32_t max_chunk;
};

th_status schedule(th_instance* instance, const th_sched_state* state, th_sched_decision* decision,
                   th_error* err) {
  return sdk::guard(err, [&] {
    if (state == nullptr || decision == nullptr ||
        (state->n_seqs > 0 && (state->seqs == nullptr || decision->run == nullptr || decision->preempt == nullptr))) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "scheduler.fifo: schedule() got a NULL argument");
    }
    Step step(*state, sdk::self<Fifo>(instance).max_chunk, *decision);
    step.run_running();
    step.admit_waiting();
  });
}

const th_scheduler_vtable kVtable = {
    sizeof(th_scheduler_vtable), sdk::create_instance<Fifo>, sdk::destroy_instance<Fifo>, check, schedule,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SCHEDULER,
    "scheduler.fifo",             "1.0.0",              &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
