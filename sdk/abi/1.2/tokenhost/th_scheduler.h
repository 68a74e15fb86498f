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
#define TH_SEQ_WAITING 0   /* arrived, nothing of it in the KV cache yet */
#define TH_SEQ_RUNNING 1   /* has KV blocks; prefilling or decoding */
#define TH_SEQ_PREEMPTED 2 /* had its blocks taken; waits to be recomputed */

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
 *  - A preempted sequence has prefilled == 0 and kv_blocks == 0; when it had generated tokens,
 *    prompt_len = prompt + generated - 1 (it recomputes them, then decodes the last one).
 *  - A decision that over-commits the blocks is not an error: the step that runs out of blocks
 *    preempts the newest running sequence and the engine decides again.
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
