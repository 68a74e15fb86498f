/*
 * tokenhost plugin ABI: scheduler plugins (TH_KIND_SCHEDULER).
 *
 * Each step, an engine's scheduler actor shows its scheduler plugin every sequence it holds and the
 * free KV blocks, and the plugin decides which sequences run in this step and how many prompt tokens
 * each prefills (continuous batching, chunked prefill, priorities), and which running sequences to
 * preempt (their KV blocks are freed and they are recomputed later).
 */
#ifndef TOKENHOST_TH_SCHEDULER_H
#define TOKENHOST_TH_SCHEDULER_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t th_seq_state;
#define TH_SEQ_WAITING 0   /* arrived, not run yet: nothing of it in the KV cache, or (ABI 1.5) only a
                            * cached prefix (th_sched_state.seq_cached) */
#define TH_SEQ_RUNNING 1   /* has KV blocks; prefilling or decoding */
#define TH_SEQ_PREEMPTED 2 /* had its blocks taken; waits to be recomputed */
#define TH_SEQ_LOADING 3   /* ABI 1.9: a KV connector (th_kv_connector.h) is writing its cached prefix
                            * into blocks it holds: prefilled and kv_blocks count those positions and
                            * blocks already; it may not run until it turns WAITING (a decision that
                            * runs it is refused). Shown only to schedulers built against 1.9 or later:
                            * an older one never sees the sequence, its blocks are not free to it. */

typedef struct th_sched_seq {
  uint64_t seq_id;
  th_seq_state state;
  int32_t priority;        /* larger runs first where the plugin honours priorities; default 0 */
  uint64_t arrival_ns;     /* monotonic clock of the host */
  uint32_t prompt_len;     /* tokens to prefill before decoding (prompt + tokens generated before a preemption) */
  uint32_t prefilled;      /* of those, already in the KV cache */
  uint32_t generated;      /* tokens generated so far */
  uint32_t max_new_tokens;
  uint32_t kv_blocks;      /* blocks it holds now */
} th_sched_seq;

/* How the host keeps these numbers, which a scheduler's block accounting relies on:
 *  - A sequence prefills while prefilled < prompt_len; once prefilled == prompt_len it decodes, one
 *    token a step, and each decoded token raises prompt_len and prefilled by one.
 *  - kv_blocks = ceil(prefilled / block_size): the blocks of the positions in the cache.
 *  - To run n tokens a sequence needs max(0, ceil((prefilled + n) / block_size) - kv_blocks) more
 *    blocks; the free ones are free_kv_blocks, plus those of the sequences the decision preempts.
 *  - A waiting sequence has prefilled == 0 and kv_blocks == 0, or (ABI 1.5) the positions and blocks
 *    of the cached prefix it was given (seq_cached); those blocks may be shared with other sequences,
 *    so free_kv_blocks can grow by less than a preempted sequence's kv_blocks.
 *  - A preempted sequence has prefilled == 0 and kv_blocks == 0; when it had generated tokens,
 *    prompt_len = prompt + generated - 1 (it recomputes them, then decodes the last one).
 *  - A decision that over-commits the blocks is not an error: the step that runs out of blocks
 *    preempts the newest running sequence and the engine decides again.
 *  - Draft tokens (ABI 1.4, run_draft) need no blocks of the scheduler's: their positions are reserved
 *    after every entry's own, dropped when the pool lacks room, and those rejected are given back after
 *    the step, so kv_blocks never counts them (a sequence's accepted ones raise prefilled as decoded
 *    tokens do).
 *  - In an engine with a sliding window (ABI 1.6: attention sinks, th_kvcache_vtable.seq_drop_blocks)
 *    the numbers count cache positions, not tokens: the positions the window released are left out of
 *    prompt_len and prefilled, and prompt_len and max_new_tokens are capped so that no sequence ever
 *    needs more than sinks + window positions (a longer prompt shows the part the cache can take next:
 *    the host releases the oldest window positions after each step, and the rest appears as it goes).
 *    The rules above hold as they are.
 * plugin_sched.hpp (C++) implements this accounting. */
typedef struct th_sched_state {
  uint32_t struct_size;
  const th_sched_seq *seqs; /* [n_seqs], in arrival order; OWNERSHIP: host, valid during schedule() */
  uint32_t n_seqs;
  uint32_t total_kv_blocks;
  uint32_t free_kv_blocks;
  uint32_t block_size;      /* token positions per KV block */
  uint32_t max_step_tokens; /* token budget of one step (engine setting) */
  uint32_t max_step_seqs;   /* sequences per step at most (engine setting) */
  uint64_t now_ns;
  /* ABI 1.3. The client of each sequence, parallel to seqs ([n_seqs]): sequences of one client (the
   * gateway's API key, else the address the request came from) carry the same number while the client
   * has sequences in this engine; different clients carry different numbers. Numbers are not dense
   * and are not reused while any sequence of their client is held. A scheduler that shares steps
   * between clients reads it (scheduler.continuous: fair_share); a state from a 1.2 host lacks it
   * (TH_HAS_MEMBER(state, th_sched_state, seq_clients)): every sequence is then one client's.
   * OWNERSHIP: host, valid during schedule(). */
  const uint32_t *seq_clients;
  /* ABI 1.4. Speculative decoding, parallel to seqs ([n_seqs]): the draft tokens the engine would
   * verify with each decoding sequence in this step if granted them (th_sched_decision.run_draft); 0
   * for a sequence that prefills, has not generated yet, or may not speculate (no proposer, the
   * request turned it off). OWNERSHIP: host, valid during schedule(). */
  const uint32_t *seq_draft;
  /* ABI 1.5. Prefix caching, parallel to seqs ([n_seqs]): the positions of each sequence's prompt that
   * its engine's kvcache had cached when the request arrived (th_kvcache_vtable.seq_lookup). They are
   * already counted in prefilled and kv_blocks, so a scheduler that plans by prefilled prefills only
   * the rest; a waiting sequence holding cached blocks is WAITING with prefilled > 0. 0 for a sequence
   * that found nothing, was preempted since (it recomputes), or runs on a kvcache without prefix
   * caching. OWNERSHIP: host, valid during schedule(). */
  const uint32_t *seq_cached;
} th_sched_state;

/* One sequence to run in this step: n_tokens prompt tokens to prefill (a prefill chunk), or 1 to
 * decode one token once its prompt is fully prefilled. */
typedef struct th_sched_item {
  uint64_t seq_id;
  uint32_t n_tokens;
} th_sched_item;

/* OWNERSHIP: the arrays are the host's, with capacity for state->n_seqs entries each; the plugin
 * writes entries and sets the counts. */
typedef struct th_sched_decision {
  uint32_t struct_size;
  th_sched_item *run;  /* sequences to run, in the order they are placed in the batch */
  uint32_t n_run;
  uint64_t *preempt;   /* running sequences to preempt before this step */
  uint32_t n_preempt;
  /* ABI 1.4. Parallel to run, zeroed by the host: the draft tokens granted to run[i], at most the
   * seq_draft of its sequence (0 for a prefill chunk). They count against max_step_tokens with the
   * n_tokens of every entry; their positions are reserved after every entry's own, and a draft the
   * pool cannot hold is dropped (never a preemption), so a grant needs no free blocks. The engine
   * asks its proposer for at most the grant. A scheduler built against 1.3 or older grants nothing
   * itself: the host then grants each decoding entry, in run order, what the step's budget has left. */
  uint32_t *run_draft;
} th_sched_decision;

typedef struct th_scheduler_vtable {
  /* th_vtable_head, repeated flat. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* Decides the next step. The host validates the decision (unknown ids, a sequence twice, a budget
   * overrun, too many blocks) and rejects an invalid one as TH_ERR_INTERNAL. An empty run list with
   * sequences waiting means "wait for resources". THREADING: the instance's thread. */
  th_status (*schedule)(th_instance *instance, const th_sched_state *state,
                        th_sched_decision *decision, th_error *err);
} th_scheduler_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_SCHEDULER_H */
