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

  /* ABI 1.4. Parallel to seqs ([n_seqs]): the most draft tokens the host verifies for each sequence,
   * <= max_draft (0: the sequence takes no draft this step, the request or the engine's controller
   * asked for none). A plugin built against 1.3 proposes up to max_draft for every sequence; the host
   * cuts each draft to its sequence's bound. */
  const uint32_t *seq_max_draft;

  /* ABI 1.4. Speculative sampling, OPT-IN per draft token. A proposer that draws draft token j of
   * sequence k from a distribution q of its own may write q, and the host then verifies that token of
   * a request that samples (temperature > 0) by speculative sampling: it accepts it with probability
   * min(1, p(token) / q(token)), p being the target's distribution after every sampling option of the
   * request, and on rejection draws from max(0, p - q) normalized. The tokens then follow the target's
   * distribution exactly, but are not the text plain decoding gives with the same seed (without q the
   * host accepts a draft token only where the request's own draw equals it: the same text). Greedy
   * requests are verified by exact match either way.
   * Layout: entry e = k * max_draft + j has room for dist_capacity pairs at dist_tokens[e *
   * dist_capacity ...] and dist_probs[e * dist_capacity ...]; dist_len[e] (0 from the host) is how
   * many the plugin wrote: every token with q > 0, the drafted one among them, probabilities finite,
   * in (0, 1] and summing to at most 1 (tokens not listed have q = 0). A draft token whose q breaks
   * these rules is verified by exact match. The token must really be drawn from the q written (a
   * draft chosen by argmax with a softened q written beside it makes the output follow neither
   * distribution). dist_capacity is 0 and the pointers NULL when the host offers no room.
   * OWNERSHIP: host buffers, valid during the call. */
  uint32_t dist_capacity;
  int32_t *dist_tokens;
  float *dist_probs;
  uint32_t *dist_len;
} th_spec_propose_args;

typedef struct th_spec_decode_vtable {
  /* th_vtable_head, repeated flat. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* REQUIRED. Writes a draft for each sequence of args. Called by the engine once per step, on its
   * thread, for the sequences that decode a token in that step (not while they prefill) and may take
   * a draft (seq_max_draft > 0: the request did not turn speculation off), with max_draft at most 16
   * (host 1.6 asks for 4). The host verifies every draft in that step and keeps the longest
   * run the target's own sampling agrees with, so output is exactly plain decoding's whatever is
   * proposed (or, for drafts with their distributions written, follows the target's distribution:
   * see dist_capacity). Host 1.6 takes chains and trees: a draft ends at its first entry whose parent
   * is neither -1 nor an earlier entry, or whose token is outside the vocabulary. A tree is verified
   * in one step under tree attention (each token sees its ancestors only; an attention plugin built
   * before 1.4 gets the tree's leading chain), along the first child whose token the target's own
   * sampling gives, by exact match (written distributions count for chains only). A call that fails
   * costs that step its drafts, nothing else. */
  th_status (*propose)(th_instance *instance, const th_spec_propose_args *args, th_error *err);
  /* Told that n_accepted of the n_proposed draft tokens of seq_id were kept (along the accepted path).
   * OPTIONAL (may be NULL). Called after each verified draft (n_proposed counts what the host kept of
   * the draft, after the cuts above and the pool's room), on the thread propose() runs on. */
  void (*accepted)(th_instance *instance, uint64_t seq_id, uint32_t n_proposed, uint32_t n_accepted);
  /* The sequence ended: drop any state kept for it. OPTIONAL (may be NULL). Called by host 1.6 when a
   * request of the engine ends, whatever its reason. */
  void (*seq_end)(th_instance *instance, uint64_t seq_id);
} th_spec_decode_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_SPEC_DECODE_H */
