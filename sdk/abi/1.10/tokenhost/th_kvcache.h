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
 * The memory lies on the engine's device (th_create_args.device), which `device` names since ABI 1.2.
 * The host reads: block_size, n_blocks, n_layers, n_kv_heads, head_dim, dtype, the strides, k_base,
 * v_base and (1.2) device; for a TH_DTYPE_Q8_0 cache (ABI 1.6: an engine whose kv_dtype is q8_0, with
 * kvcache and attention plugins built against 1.6 or later) also quant_group (> 0, dividing head_dim)
 * and the scale members. The host writes a q8_0 head vector group by group: scale = max |x| / 127
 * (0 for an all-zero group), each element round(x / scale) as int8 in [-127, 127]; the value read back
 * is element * scale. Attention plugins read the same (the SDK's plugin_kv.hpp does both). */
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
  /* ABI 1.2. Where the pools (and scale arrays) live: TH_DEVICE_CPU (host memory) or the memory of
   * device device_index of kind TH_DEVICE_CUDA. The host refuses a layout on another device than its
   * engine's. A layout filled by a plugin built against 1.0 or 1.1 (struct_size ending before these)
   * lies on the engine's device: read them through TH_HAS_MEMBER. */
  th_device_kind device;
  int32_t device_index;
} th_kv_layout;

/* Block accounting, exact: used + free + cached == total at all times (cached is 0 for a plugin
 * without prefix caching, and absent from one built against 1.4 or older, whose stats end before it). */
typedef struct th_kv_stats {
  uint32_t struct_size;
  uint32_t total_blocks;
  uint32_t used_blocks;   /* referenced by at least one sequence */
  uint32_t free_blocks;
  uint32_t shared_blocks; /* referenced by more than one sequence */
  uint32_t n_seqs;
  /* ABI 1.5. The host reads each through TH_HAS_MEMBER with the struct_size the plugin wrote. */
  uint32_t cached_blocks;  /* held by no sequence, kept for a later seq_lookup; the plugin takes them
                            * back (evicts), least recently used first, when it runs out of free ones:
                            * the host counts them as free when it plans a step */
  uint32_t held_blocks;    /* the sum over sequences of the blocks each holds (a block two sequences
                            * share counts twice): the host checks it against its own positions */
  uint64_t evicted_blocks; /* cached blocks taken back since create() */
  uint64_t published_blocks; /* blocks added to the cache by seq_publish since create() */
} th_kv_stats;

typedef struct th_kvcache_vtable {
  /* th_vtable_head, repeated flat. Host 1.6 calls every member but seq_fork (see there).
   * The pool's size and block size are the plugin's own configuration;
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
   * TH_ERR_NOT_FOUND for an unknown parent, TH_ERR_INVALID_ARGUMENT when child already exists.
   * REQUIRED, and covered by the kvcache conformance suite, but reserved: not called by host 1.6 (n > 1
   * choices prefill each copy; they do not fork yet). */
  th_status (*seq_fork)(th_instance *instance, uint64_t parent, uint64_t child, th_error *err);

  /* The block table of seq_id: block index of each block_size positions, in order.
   * OWNERSHIP: *blocks is the plugin's, valid until the next call on this instance. */
  th_status (*seq_blocks)(th_instance *instance, uint64_t seq_id, const int32_t **blocks,
                          uint32_t *n_blocks, th_error *err);

  /* Exact block accounting. The host zeroes *out and sets out->struct_size to the size of its
   * th_kv_stats; the plugin writes no member past that size nor past its own, and sets struct_size to
   * what it wrote (a plugin built against 1.4 or older writes the first six members). */
  void (*stats)(th_instance *instance, th_kv_stats *out);

  /* ABI 1.4. Keeps positions [0, n_positions) of seq_id and releases every block that holds only
   * positions >= n_positions: a block shared with another sequence loses this sequence's reference
   * and stays the other's. Positions below n_positions are left untouched (a block holding both keeps
   * its contents; the positions past n_positions in it are rewritten before they are read again). A
   * sequence holding n_positions or fewer is left as it is; at 0 it holds no block and stays known.
   * TH_ERR_NOT_FOUND for an unknown sequence.
   * OPTIONAL (may be NULL). The host calls it after each speculative step, to give back the positions
   * of rejected draft tokens; an engine whose kvcache plugin lacks it runs without speculative decoding
   * (its log says so when the engine starts and when a spec_decode plugin is swapped in). */
  th_status (*seq_truncate)(th_instance *instance, uint64_t seq_id, uint32_t n_positions, th_error *err);

  /* ABI 1.5, prefix caching: seq_lookup, seq_publish and cache_flush, OPTIONAL together (all three or
   * none; the host uses them when all three are set, else every sequence computes its whole prompt).
   * A sequence created by seq_lookup takes part in the cache; one created by seq_reserve does not.
   *
   * seq_lookup: creates seq_id (unknown to the plugin) holding the longest prefix of tokens[0,
   * n_tokens) that the cache holds under `salt`, and sets *n_cached to the positions it covers, at most
   * n_tokens - 1 (the last prompt token is always computed: its logits give the first token). Blocks of
   * different salts are never shared (the host derives the salt from the API key and the request's
   * cache_salt). The blocks are shared by reference and pinned (never evicted) while a sequence holds
   * them; when *n_cached ends inside a block, the sequence's first write into it copies it first
   * (seq_reserve's copy-on-write). *n_cached = 0 when nothing is cached: the sequence then holds no
   * block. The plugin keeps the tokens: it needs them to publish the sequence's blocks.
   * TH_ERR_INVALID_ARGUMENT when seq_id exists. The host calls it when the engine receives a request,
   * with the whole prompt, and counts the sequence's positions from *n_cached on; when that found
   * nothing and blocks were published since, it calls seq_free and seq_lookup again with the tokens
   * of the sequence's first chunk, before the step that computes it (a preempted sequence is
   * recomputed through seq_reserve). OWNERSHIP: tokens is the host's, valid during the call. */
  th_status (*seq_lookup)(th_instance *instance, uint64_t seq_id, uint64_t salt, const int32_t *tokens,
                          uint32_t n_tokens, uint32_t *n_cached, th_error *err);

  /* seq_publish: positions [first_position, first_position + n_tokens) of seq_id now hold the keys and
   * values of tokens[0, n_tokens), written by a finished step and final (never unverified draft
   * tokens). The plugin may add each block the sequence has filled to the cache, keyed by its tokens,
   * every token before them and the salt. The host calls it after every step for every sequence of it
   * created by seq_lookup, with first_position = the positions published (or looked up) before: calls
   * are contiguous. A sequence not created by seq_lookup: ignored (TH_OK). TH_ERR_INVALID_ARGUMENT for a
   * gap, TH_ERR_NOT_FOUND for an unknown sequence. OWNERSHIP: tokens is the host's, valid during the
   * call. */
  th_status (*seq_publish)(th_instance *instance, uint64_t seq_id, uint32_t first_position,
                           const int32_t *tokens, uint32_t n_tokens, th_error *err);

  /* cache_flush: drops every cached block no sequence holds (they become free); blocks sequences hold
   * stay theirs and leave the cache (a later lookup does not find them). The host calls it for the
   * admin API's flush. */
  void (*cache_flush)(th_instance *instance);

  /* ABI 1.6, attention sinks with a sliding window. Releases blocks [first_block, first_block +
   * n_blocks) of seq_id's block table (each loses this sequence's reference: a block shared with
   * another sequence, or kept by a prefix cache, stays theirs) and moves the blocks after them down by
   * n_blocks: seq_blocks then gives the shorter table, the blocks before first_block unchanged. The
   * host rewrites every position of the blocks that moved (it re-rotates their keys, see
   * th_attention.h), so those are made the sequence's own first: a shared one is copied (copy-on-
   * write), and a prefix cache stops offering one it cached. A sequence created by seq_lookup leaves
   * the prefix cache: its positions no longer hold a prefix of its tokens, and seq_publish ignores it
   * from then on (TH_OK). Returns TH_ERR_RESOURCE_EXHAUSTED, changing nothing, when the copies need
   * more blocks than the pool has once the released ones are back; TH_ERR_NOT_FOUND for an unknown
   * sequence; TH_ERR_INVALID_ARGUMENT for n_blocks 0 or a range past the table's end.
   * OPTIONAL (may be NULL). The host calls it only for an engine with a sliding window (its manifest's
   * sliding_window), which refuses a kvcache plugin without it when it starts (a kvcache swap too). */
  th_status (*seq_drop_blocks)(th_instance *instance, uint64_t seq_id, uint32_t first_block, uint32_t n_blocks,
                               th_error *err);
} th_kvcache_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_KVCACHE_H */
