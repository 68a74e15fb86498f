/*
 * tokenhost plugin ABI: speculative decoding proposers (TH_KIND_SPEC_DECODE).
 *
 * A proposer guesses the next tokens of a sequence (a chain, or a tree of alternatives); the host runs
 * the target model over the guesses in one step, verifies them itself and keeps the longest prefix the
 * target agrees with, so output stays exactly what plain decoding gives whatever the proposer does.
 */
#ifndef TOKENHOST_TH_SPEC_DECODE_H
#define TOKENHOST_TH_SPEC_DECODE_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OWNERSHIP of every pointer: host, valid during the call. */
typedef struct th_spec_seq {
  uint64_t seq_id;
  const int32_t *tokens;   /* the whole sequence so far: prompt then generated tokens */
  uint32_t n_tokens;
} th_spec_seq;

/* Proposal for one sequence, written by the plugin into host buffers of max_draft entries.
 * Token i's parent is parents[i]: -1 for a child of the last real token, else an index < i.
 * A chain has parents[i] = i - 1. */
typedef struct th_spec_draft {
  int32_t *tokens;   /* out */
  int32_t *parents;  /* out */
  uint32_t n_draft;  /* out: entries written, 0 to propose nothing */
} th_spec_draft;

typedef struct th_spec_propose_args {
  uint32_t struct_size;
  const th_spec_seq *seqs; /* [n_seqs] */
  uint32_t n_seqs;
  uint32_t max_draft;      /* draft tokens per sequence at most */
  th_spec_draft *drafts;   /* [n_seqs]; OWNERSHIP: host */
} th_spec_propose_args;

typedef struct th_spec_decode_vtable {
  /* th_vtable_head, repeated flat. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  th_status (*propose)(th_instance *instance, const th_spec_propose_args *args, th_error *err);
  /* Told that n_accepted of the n_proposed draft tokens of seq_id were kept (along the accepted path).
   * OPTIONAL (may be NULL). */
  void (*accepted)(th_instance *instance, uint64_t seq_id, uint32_t n_proposed, uint32_t n_accepted);
  /* The sequence ended: drop any state kept for it. OPTIONAL (may be NULL). */
  void (*seq_end)(th_instance *instance, uint64_t seq_id);
} th_spec_decode_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_SPEC_DECODE_H */
