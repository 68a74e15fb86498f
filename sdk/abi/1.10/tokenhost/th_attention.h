/*
 * tokenhost plugin ABI: attention plugins (TH_KIND_ATTENTION).
 *
 * An attention plugin computes causal scaled-dot-product attention for one layer over a ragged batch:
 * prefill chunks and single decode tokens of several sequences in one call, reading keys and values
 * from the paged KV cache through the layout the kvcache plugin publishes. The host has already written
 * this step's keys and values into the cache when forward() is called.
 */
#ifndef TOKENHOST_TH_ATTENTION_H
#define TOKENHOST_TH_ATTENTION_H

#include "th_common.h"
#include "th_kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's attention over a batch of n_seqs sequences holding n_tokens query rows in all.
 * Sequence s owns query rows [seq_start[s], seq_start[s+1]); its last row sits at position
 * kv_len[s] - 1 and row i attends to positions [0, positions[i]] of that sequence (causal).
 * A position is a place in the sequence's cache: block table entry position / block_size, slot
 * position % block_size. Every position below kv_len[s] is held, contiguously, whatever the engine
 * released: in an engine with a sliding window (ABI 1.6, attention sinks) the host drops whole blocks
 * from the middle of a table (th_kvcache_vtable.seq_drop_blocks) and re-rotates the keys that moved
 * down by the positions dropped, so positions stay below sinks + window and a key's rotation always
 * matches its position. Such a sequence's position then differs from its token's index in the text;
 * attention reads it as any other.
 * Query head j uses kv head j / (n_heads / n_kv_heads) (GQA; MQA when n_kv_heads == 1).
 * OWNERSHIP: every pointer is the host's, valid during forward() only.
 *
 * DEVICES. The batch is its own tensor view: each buffer's shape is the batch's dimensions above, its
 * row stride stands beside it, and where it lives is `device`/`device_index` (ABI 1.2; the KV pools'
 * in kv->device). One batch never mixes devices: an engine lives on one device, and its host places
 * queries, outputs, tables and pools there, so a GPU attention plugin reads every pointer as device
 * memory of that one device and needs nothing beyond this header and th_kvcache.h. Per-buffer views
 * (th_tensor) are not used here: they would restate the shapes, and th_tensor cannot grow (it is
 * embedded by value in th_moe_expert_weights). */
typedef struct th_attention_batch {
  uint32_t struct_size;
  uint32_t layer;
  uint32_t n_tokens;
  uint32_t n_seqs;
  uint32_t n_heads;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  float scale;                /* usually 1/sqrt(head_dim) */
  const float *q;             /* [n_tokens][n_heads][head_dim] rows, q_row_stride floats apart */
  int64_t q_row_stride;
  const int32_t *positions;   /* [n_tokens] position of each query row within its sequence */
  const uint32_t *seq_start;  /* [n_seqs + 1] first query row of each sequence; seq_start[n_seqs] = n_tokens */
  const uint32_t *kv_len;     /* [n_seqs] positions held in the cache for each sequence */
  const int32_t *const *block_tables; /* [n_seqs] block tables (ceil(kv_len / block_size) entries) */
  const th_kv_layout *kv;     /* OWNERSHIP: the kvcache plugin's */
  float *out;                 /* [n_tokens][n_heads][head_dim] rows, out_row_stride floats apart; written */
  int64_t out_row_stride;
  /* ABI 1.2. Where q, out, positions, seq_start, kv_len and the block tables live (the KV pools say
   * where they live in kv->device): TH_DEVICE_CPU, or device device_index of kind TH_DEVICE_CUDA.
   * Host 1.2 only runs CPU engines and sets TH_DEVICE_CPU, 0. */
  th_device_kind device;
  int32_t device_index;

  /* ABI 1.4. Tree attention, to verify a tree of draft tokens in one step. NULL: every row is causal as
   * above. Else [n_tokens], same device as positions: row_parent[i] is -1 or the index of an earlier row
   * of the same sequence, its parent; row i then attends to the positions before its sequence's first
   * row in this batch, to its own position and to its ancestors' (the rows reached by following
   * row_parent), and to no other row of this batch. The rows of a sequence hold consecutive positions
   * (positions[i + 1] = positions[i] + 1 within a sequence: a position is a row's place in the cache,
   * not its token's place in the text, which rotary embeddings, applied by the host, already carry). A
   * chain (row_parent[i] = i - 1, -1 at each sequence's first row) is plain causal attention.
   * Host 1.6 sets it only in steps that verify a tree of draft tokens, and only for attention plugins
   * built against 1.4 or later (others get the tree's first chain); sdk::validate_attention_batch()
   * checks it and sdk::tree_visible() says which positions a row sees. */
  const int32_t *row_parent;
} th_attention_batch;

typedef struct th_attention_vtable {
  /* th_vtable_head, repeated flat. check() refuses KV dtypes and head sizes it does not handle. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* Computes batch->out. THREADING: the instance's thread; the plugin may use its own threads inside
   * the call but must have joined them before returning. */
  th_status (*forward)(th_instance *instance, const th_attention_batch *batch, th_error *err);
} th_attention_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_ATTENTION_H */
