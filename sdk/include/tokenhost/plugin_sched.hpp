// tokenhost plugin SDK: header-only C++ helpers for scheduler plugins (C++17).
//
// Like plugin.hpp it adds no ABI: it only computes with the C structs of th_scheduler.h. What it gives:
//   - sdk::kv_blocks_for(), blocks_needed(): the block accounting of th_sched_seq (a sequence holding
//     kv_blocks blocks needs max(0, ceil((prefilled + n) / block_size) - kv_blocks) more to run n tokens);
//   - sdk::next_token_positions(), final_positions(), never_fits(): what a sequence needs at least / at most;
//   - sdk::check_schedule_args(): the NULL checks every schedule() starts with;
//   - sdk::seq_client(): the client of a sequence (ABI 1.3; 0 for all on an older host);
//   - sdk::seq_draft(): the draft tokens a decoding sequence may take (ABI 1.4; 0 on an older host);
//   - sdk::seq_cached(): the prompt positions a sequence found in the prefix cache (ABI 1.5; 0 on an
//     older host);
//   - sdk::SchedStep: one schedule() call's budgets (tokens, sequence slots, free blocks), which
//     sequences are decided (run or preempted), the decision writer and its draft grants.
//
// The host's facts these helpers follow are the ABI's: th_scheduler.h, above th_sched_state.
#ifndef TOKENHOST_PLUGIN_SCHED_HPP
#define TOKENHOST_PLUGIN_SCHED_HPP

#include <tokenhost/plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tokenhost::sdk {

// Blocks that hold `positions` token positions (a block_size of 0 counts as 1).
inline uint64_t kv_blocks_for(uint64_t positions, uint32_t block_size) {
  const uint64_t bs = std::max<uint32_t>(block_size, 1);
  return (positions + bs - 1) / bs;
}

inline bool is_waiting_or_preempted(const th_sched_seq& seq) {
  return seq.state == TH_SEQ_WAITING || seq.state == TH_SEQ_PREEMPTED;
}

// Whether its prompt is all in the cache: the sequence then runs one decode token per step.
inline bool is_decoding(const th_sched_seq& seq) { return seq.prefilled >= seq.prompt_len; }

// Prompt tokens not yet in the cache.
inline uint32_t prompt_left(const th_sched_seq& seq) {
  return is_decoding(seq) ? 0 : seq.prompt_len - seq.prefilled;
}

// Blocks beyond the ones it holds that the sequence needs to run n more tokens.
inline uint64_t blocks_needed(const th_sched_seq& seq, uint32_t n, uint32_t block_size) {
  const uint64_t blocks = kv_blocks_for(uint64_t(seq.prefilled) + n, block_size);
  return blocks > seq.kv_blocks ? blocks - seq.kv_blocks : 0;
}

// Positions the cache must hold for the sequence to produce its next token: its prompt_len, plus the
// last generated token's position when it has generated any (a preempted sequence recomputes up to it).
inline uint64_t next_token_positions(const th_sched_seq& seq) {
  return uint64_t(seq.prompt_len) + (seq.generated > 0 ? 1 : 0);
}

// Positions it holds at most once it has generated max_new_tokens (an upper bound: the engine may
// stop it earlier, at EOS or the context length).
inline uint64_t final_positions(const th_sched_seq& seq) {
  return uint64_t(seq.prompt_len) + (seq.max_new_tokens > seq.generated ? seq.max_new_tokens - seq.generated : 0);
}

// Whether the sequence can never produce its next token, even with every block of the pool.
inline bool never_fits(const th_sched_state& state, const th_sched_seq& seq) {
  return kv_blocks_for(next_token_positions(seq), state.block_size) > state.total_kv_blocks;
}

// The client of sequence i (th_sched_state.seq_clients, ABI 1.3). A state from a 1.2 host has no such
// array: every sequence is then client 0's, one client holding them all.
inline uint32_t seq_client(const th_sched_state& state, uint32_t i) {
  if (!TH_HAS_MEMBER(&state, th_sched_state, seq_clients) || state.seq_clients == nullptr) return 0;
  return state.seq_clients[i];
}

// The draft tokens the engine would verify with sequence i in this step (th_sched_state.seq_draft,
// ABI 1.4); 0 on an older host, which grants drafts itself.
inline uint32_t seq_draft(const th_sched_state& state, uint32_t i) {
  return TH_HAS_MEMBER(&state, th_sched_state, seq_draft) && state.seq_draft != nullptr ? state.seq_draft[i] : 0;
}

// The prompt positions of sequence i that came from the kvcache's prefix cache (th_sched_state.seq_cached,
// ABI 1.5; already in its prefilled); 0 on an older host.
inline uint32_t seq_cached(const th_sched_state& state, uint32_t i) {
  return TH_HAS_MEMBER(&state, th_sched_state, seq_cached) && state.seq_cached != nullptr ? state.seq_cached[i] : 0;
}

// Throws Error(TH_ERR_INVALID_ARGUMENT), naming plugin_id, when a schedule() argument is NULL.
inline void check_schedule_args(const char* plugin_id, const th_sched_state* state, const th_sched_decision* decision) {
  if (state == nullptr || decision == nullptr ||
      (state->n_seqs > 0 && (state->seqs == nullptr || decision->run == nullptr || decision->preempt == nullptr))) {
    throw Error(TH_ERR_INVALID_ARGUMENT, std::string(plugin_id) + ": schedule() got a NULL argument");
  }
}

// One schedule() call. Construction empties the decision; run() and preempt() append to it and keep
// the budgets: tokens and sequence slots left, and the free blocks (blocks of a preempted sequence
// count as free at once; the host frees them before the step). A sequence is decided once it is run
// or preempted, and is never listed twice. Indices are those of state.seqs.
class SchedStep {
 public:
  SchedStep(const th_sched_state& state, th_sched_decision& decision)
      : state_(state),
        decision_(decision),
        tokens_left_(state.max_step_tokens),
        seqs_left_(state.max_step_seqs),
        free_blocks_(state.free_kv_blocks),
        decided_(state.n_seqs, false) {
    decision_.n_run = 0;
    decision_.n_preempt = 0;
    if (has_run_draft())
      for (uint32_t k = 0; k < state.n_seqs; ++k) decision_.run_draft[k] = 0;
  }

  const th_sched_state& state() const { return state_; }
  uint32_t size() const { return state_.n_seqs; }
  const th_sched_seq& seq(uint32_t i) const { return state_.seqs[i]; }
  uint32_t client(uint32_t i) const { return seq_client(state_, i); }
  bool decided(uint32_t i) const { return decided_[i]; }
  bool running(uint32_t i) const { return state_.seqs[i].state == TH_SEQ_RUNNING; }
  bool undecided_running(uint32_t i) const { return running(i) && !decided_[i]; }
  bool any_running() const {
    for (uint32_t i = 0; i < size(); ++i)
      if (running(i)) return true;
    return false;
  }

  uint32_t tokens_left() const { return tokens_left_; }
  uint32_t seqs_left() const { return seqs_left_; }
  uint64_t free_blocks() const { return free_blocks_; }
  bool has_budget() const { return tokens_left_ > 0 && seqs_left_ > 0; }
  uint32_t n_run() const { return decision_.n_run; }
  uint32_t n_preempt() const { return decision_.n_preempt; }

  uint64_t blocks_needed(uint32_t i, uint32_t n) const { return sdk::blocks_needed(seq(i), n, state_.block_size); }

  // What sequence i runs in this step given up to `tokens` of budget: 1 to decode, else a prefill chunk
  // of min(prompt left, max_chunk, tokens).
  uint32_t step_tokens(uint32_t i, uint32_t max_chunk, uint32_t tokens) const {
    if (is_decoding(seq(i))) return 1;
    return std::min({prompt_left(seq(i)), max_chunk, tokens});
  }
  uint32_t step_tokens(uint32_t i, uint32_t max_chunk) const { return step_tokens(i, max_chunk, tokens_left_); }

  // The largest m <= n whose new blocks fit in `blocks` (0 when not one token fits).
  uint32_t fit_tokens(uint32_t i, uint32_t n, uint64_t blocks) const {
    const th_sched_seq& s = seq(i);
    const uint64_t capacity = (uint64_t(s.kv_blocks) + blocks) * std::max<uint32_t>(state_.block_size, 1);
    return capacity > s.prefilled ? uint32_t(std::min<uint64_t>(n, capacity - s.prefilled)) : 0;
  }
  uint32_t fit_tokens(uint32_t i, uint32_t n) const { return fit_tokens(i, n, free_blocks_); }

  // How many of victims (undecided running indices, in the order they are to be taken) must be
  // preempted for `blocks` new blocks to fit: the shortest prefix, or -1 when all of them do not suffice.
  int64_t victims_for(uint64_t blocks, const std::vector<uint32_t>& victims) const {
    uint64_t free = free_blocks_;
    for (size_t k = 0;; ++k) {
      if (blocks <= free) return int64_t(k);
      if (k == victims.size()) return -1;
      free += seq(victims[k]).kv_blocks;
    }
  }

  // Preempts the most recently arrived undecided running sequence until sequence i (running or not)
  // fits n tokens; when that latest one is i itself, i is preempted too. Returns whether i can run.
  bool make_room_by_latest(uint32_t i, uint32_t n) {
    while (blocks_needed(i, n) > free_blocks_) {
      const uint32_t victim = latest_undecided_running();
      preempt(victim);
      if (victim == i) return false;
    }
    return !decided_[i];
  }

  // Appends {seq i, n tokens} to the run list. Throws Error(TH_ERR_INTERNAL) when that breaks a budget:
  // a scheduler bug must not reach the host as an invalid decision.
  void run(uint32_t i, uint32_t n) {
    const uint64_t blocks = blocks_needed(i, n);
    if (decided_[i] || n == 0 || n > tokens_left_ || seqs_left_ == 0 || blocks > free_blocks_ ||
        (is_decoding(seq(i)) ? n != 1 : n > prompt_left(seq(i)))) {
      throw Error(TH_ERR_INTERNAL, "scheduler: run of sequence " + std::to_string(seq(i).seq_id) + " with " +
                                       std::to_string(n) + " tokens breaks a budget");
    }
    decision_.run[decision_.n_run++] = th_sched_item{seq(i).seq_id, n};
    run_index_.push_back(i);
    decided_[i] = true;
    tokens_left_ -= n;
    seqs_left_ -= 1;
    free_blocks_ -= blocks;
  }

  // Appends running sequence i to the preempt list; its blocks count as free from now on.
  void preempt(uint32_t i) {
    if (decided_[i] || !running(i)) {
      throw Error(TH_ERR_INTERNAL, "scheduler: cannot preempt sequence " + std::to_string(seq(i).seq_id));
    }
    decision_.preempt[decision_.n_preempt++] = seq(i).seq_id;
    decided_[i] = true;
    free_blocks_ += seq(i).kv_blocks;
  }

  // Reorders the run list so that decodes come before prefill chunks, each group keeping its order
  // (draft grants move with their entries).
  void order_decodes_first() {
    std::vector<th_sched_item> items(decision_.run, decision_.run + decision_.n_run);
    std::vector<uint32_t> index = run_index_;
    std::vector<uint32_t> drafts(items.size(), 0);
    for (size_t j = 0; j < items.size(); ++j) drafts[j] = granted(j);
    uint32_t k = 0;
    for (int decodes = 1; decodes >= 0; --decodes) {
      for (size_t j = 0; j < items.size(); ++j) {
        if (is_decoding(seq(index[j])) != bool(decodes)) continue;
        decision_.run[k] = items[j];
        if (has_run_draft()) decision_.run_draft[k] = drafts[j];
        run_index_[k++] = index[j];
      }
    }
  }

  // Speculative decoding (ABI 1.4): grants each decoding entry of the run list, in order, its seq_draft
  // tokens from the budget left (after every placement: drafts never take a prefill's or a decode's
  // tokens). Returns the draft tokens granted. Nothing on an older host, which grants them itself.
  uint32_t grant_drafts() {
    if (!has_run_draft()) return 0;
    uint32_t total = 0;
    for (uint32_t k = 0; k < decision_.n_run; ++k) {
      const uint32_t i = run_index_[k];
      const uint32_t n = is_decoding(seq(i)) ? std::min(sdk::seq_draft(state_, i), tokens_left_) : 0;
      decision_.run_draft[k] = n;
      tokens_left_ -= n;
      total += n;
    }
    return total;
  }
  // The draft tokens granted to run entry k.
  uint32_t granted(uint32_t k) const { return has_run_draft() ? decision_.run_draft[k] : 0; }

 private:
  uint32_t latest_undecided_running() const {
    for (uint32_t j = size(); j-- > 0;) {
      if (undecided_running(j)) return j;
    }
    throw Error(TH_ERR_INTERNAL, "scheduler: no running sequence left to preempt");
  }

  bool has_run_draft() const {
    return TH_HAS_MEMBER(&decision_, th_sched_decision, run_draft) && decision_.run_draft != nullptr;
  }

  const th_sched_state& state_;
  th_sched_decision& decision_;
  uint32_t tokens_left_;
  uint32_t seqs_left_;
  uint64_t free_blocks_;
  std::vector<bool> decided_;       // run or preempted in this step
  std::vector<uint32_t> run_index_;  // state index of each run entry
};

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_SCHED_HPP
