/*
 * tokenhost plugin ABI: kvcache plugins (TH_KIND_KVCACHE).
 *
 * A kvcache plugin owns the key/value memory of one engine: it allocates blocks of block_size token
 * positions, hands them to sequences, shares them between forked sequences (copy-on-write), and
 * publishes the layout (th_kv_layout) through which the host writes new keys/values and attention
 * plugins read them.
 */
#ifndef TOKENHOST_TH_KVCACHE_H
#define TOKENHOST_TH_KVCACHE_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the keys and values of every block live.
 *
 * Byte address of the key of (layer l, block b, position t within the block, kv head h, element d):
 *   k_base + l*layer_stride + b*block_stride + h*head_stride + t*token_stride + element_offset(d)
 * and the same with v_base for values. For float dtypes element_offset(d) = d * sizeof(element). For
 * block-quantized dtypes (TH_DTYPE_Q8_0, TH_DTYPE_Q4_0) a head vector of head_dim elements is stored as
 * head_dim / quant_group quantized groups, element bytes only (ggml's block without its scale), and the
 * scale (f32) of group g lives at
 *   k_scale_base + l*scale_layer_stride + b*scale_block_stride + h*scale_head_stride
 *                + t*scale_token_stride + g*sizeof(float)
 * (the same with v_scale_base). For float dtypes quant_group is 0 and the scale members are 0/NULL.
 *
 * OWNERSHIP: the kvcache plugin; the layout and its memory stay valid and unmoved until destroy().
 * The memory lies on the engine's device (th_create_args.device). */
typedef struct th_kv_layout {
  uint32_t struct_size;
  uint32_t block_size; /* token positions per block */
  uint32_t n_blocks;   /* blocks in the pool */
  uint32_t n_layers;
  uint32_t n_kv_heads;
  uint32_t head_dim;
  th_dtype dtype;
  uint32_t quant_group; /* elements per scale for quantized dtypes; 0 for floats */
  int64_t layer_stride; /* bytes */
  int64_t block_stride;
  int64_t head_stride;
  int64_t token_stride;
  void *k_base;
  void *v_base;
  int64_t scale_layer_stride; /* bytes; 0 for floats */
  int64_t scale_block_stride;
  int64_t scale_head_stride;
  int64_t scale_token_stride;
  void *k_scale_base; /* NULL for floats */
  void *v_scale_base;
} th_kv_layout;

/* Block accounting, exact: used + free == total at all times. */
typedef struct th_kv_stats {
  uint32_t struct_size;
  uint32_t total_blocks;
  uint32_t used_blocks;   /* referenced by at least one sequence */
  uint32_t free_blocks;
  uint32_t shared_blocks; /* referenced by more than one sequence */
  uint32_t n_seqs;
} th_kv_stats;

typedef struct th_kvcache_vtable {
  /* th_vtable_head, repeated flat. The pool's size and block size are the plugin's own configuration;
   * create() reads the model's n_layers, n_kv_heads and head_dim from th_create_args.model. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* The layout of this instance. OWNERSHIP: *out is the plugin's, valid until destroy(). */
  th_status (*get_layout)(th_instance *instance, const th_kv_layout **out, th_error *err);

  /* Makes positions [0, n_positions) of seq_id addressable, creating the sequence if new, and
   * positions [first_write, n_positions) privately writable: a block shared with another sequence
   * that holds a position >= first_write is copied first (copy-on-write). Returns
   * TH_ERR_RESOURCE_EXHAUSTED, changing nothing, when the pool lacks the blocks. */
  th_status (*seq_reserve)(th_instance *instance, uint64_t seq_id, uint32_t n_positions,
                           uint32_t first_write, th_error *err);

  /* Drops the sequence and its references to blocks; unknown ids are ignored. */
  void (*seq_free)(th_instance *instance, uint64_t seq_id);

  /* Makes child share every block of parent (reference counted, copy-on-write on later writes).
   * TH_ERR_NOT_FOUND for an unknown parent, TH_ERR_INVALID_ARGUMENT when child already exists. */
  th_status (*seq_fork)(th_instance *instance, uint64_t parent, uint64_t child, th_error *err);

  /* The block table of seq_id: block index of each block_size positions, in order.
   * OWNERSHIP: *blocks is the plugin's, valid until the next call on this instance. */
  th_status (*seq_blocks)(th_instance *instance, uint64_t seq_id, const int32_t **blocks,
                          uint32_t *n_blocks, th_error *err);

  /* Exact block accounting. */
  void (*stats)(th_instance *instance, th_kv_stats *out);
} th_kvcache_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_KVCACHE_H */
