/*
 * tokenhost plugin ABI: KV connectors (TH_KIND_KV_CONNECTOR, ABI 1.9).
 *
 * A KV connector moves whole KV blocks out of an engine's pool and back: to a tier that outlives the
 * pool (disk, another process's memory) or to another engine. The host keys every block, so that a
 * connector stores and finds bytes without knowing tokens, models or API keys:
 *
 *  - namespace_id: 64 bits over the model's identity (its weights), the KV layout's shape (block size,
 *    layers, kv heads, head dim, dtype, q8_0 group: the SDK's kv_shape_fingerprint) and the request's
 *    cache namespace (API key and cache_salt). Blocks of different namespaces never meet: nothing
 *    crosses models, dtypes or API keys.
 *  - key: 64 bits chained over the cache namespace and every token up to the block's end, so the key
 *    of block i names the whole prefix through it (the same chain the host's prefix summaries use).
 *
 * A block's bytes are read and written through th_kv_layout (th_kvcache.h), which a connector receives
 * with each transfer: it needs no host header. The SDK's plugin_kv_blocks.hpp turns a block into an
 * image independent of the pool's strides and back (the format the in-tree connectors store).
 *
 * Several connectors may serve one engine as an ordered stack (the manifest's [[engines.NAME.kv_connector]]
 * tables, first listed first): the host asks each in order which leading blocks of a prompt it holds
 * and loads from the one that holds the most (the first of equals), and saves every block it publishes
 * to each of them.
 *
 * Instances of one plugin on different engines may talk: th_host_api.peer_send hands bytes to the
 * host, which delivers them to the same plugin's layers on the named engine, in this process or on
 * another node of a cluster, through receive() (kv_connector.actor sends its saves to a decode engine
 * that way).
 *
 * THREADING: an instance belongs to the engine's worker actor and is called from its thread only,
 * between steps (th_common.h). A connector does its transfers on threads of its own; nothing of a
 * transfer happens inside a host call beyond what the member says.
 */
#ifndef TOKENHOST_TH_KV_CONNECTOR_H
#define TOKENHOST_TH_KV_CONNECTOR_H

#include "th_common.h"
#include "th_kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One transfer: n_blocks blocks of the pool described by layout, keys[i] the key of blocks[i].
 * OWNERSHIP: the host's, valid during the call that receives it only (keys, blocks, layout, peer): a
 * connector copies what it keeps. The pool memory the blocks name is the kvcache plugin's and stays
 * valid and unmoved while the engine runs (th_kvcache.h). */
typedef struct th_kv_transfer {
  uint32_t struct_size;
  uint64_t ticket;       /* the host's number for this transfer, unique per instance; poll() reports it */
  uint64_t namespace_id; /* see above */
  const uint64_t *keys;  /* [n_blocks], in prefix order */
  const int32_t *blocks; /* [n_blocks] block indices of the pool, in [0, layout->n_blocks) */
  uint32_t n_blocks;
  const th_kv_layout *layout;
  /* Where the blocks go or come from when the connector serves several: NULL for the connector's own
   * store (a tier). Reserved for transfers between engines: host 1.9 passes NULL. */
  const char *peer;
} th_kv_transfer;

/* What became of a transfer (poll()). An array element: fixed for ABI major 1. */
typedef struct th_kv_completion {
  uint64_t ticket;
  th_status status;  /* TH_OK: n_done blocks moved; otherwise what failed (the first n_done moved) */
  uint32_t n_done;   /* load: the leading blocks written into the pool and verified; save: blocks stored */
  /* Why it failed, naming what (a file, a peer); NULL when status is TH_OK.
   * OWNERSHIP: the plugin's, valid until the next call on the instance. */
  const char *message;
} th_kv_completion;

/* Totals since create(), all counts. The host zeroes *out and sets struct_size to its size; the plugin
 * writes no member past that size nor past its own and sets struct_size to what it wrote. */
typedef struct th_kv_connector_stats {
  uint32_t struct_size;
  uint64_t stored_blocks;  /* blocks the connector holds now */
  uint64_t stored_bytes;   /* their bytes */
  uint64_t capacity_bytes; /* the most it holds, 0 when unbounded */
  uint64_t evicted_blocks; /* blocks dropped to stay within capacity */
  uint64_t refused_blocks; /* blocks found damaged (checksum, size, header) and dropped, never served */
} th_kv_connector_stats;

typedef struct th_kv_connector_vtable {
  /* th_vtable_head, repeated flat. Host 1.9 calls every member. create() reads th_create_args.model
   * (the model's shape) and its configuration; the layout comes with each transfer. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  /* Stops the connector's transfers: a load still writing into the pool ends before destroy() returns
   * (the host frees the blocks after). Saves not yet stored may be dropped. */
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* How many of keys[0, n_keys), from the first, the connector could load now under namespace_id (it
   * stops at the first it lacks): a quick answer from an index, not a read of the blocks. The host calls
   * it when a request arrives, with the keys of the prompt's whole blocks past those its kvcache holds.
   * OWNERSHIP: keys is the host's, valid during the call. */
  th_status (*contains)(th_instance *instance, uint64_t namespace_id, const uint64_t *keys, uint32_t n_keys,
                        uint32_t *n_leading, th_error *err);

  /* Stores the blocks of t under their keys. The blocks' bytes are read during the call (the host may
   * reuse the blocks as soon as it returns); storing them may finish later, reported by poll() with
   * t->ticket. Blocks the connector already holds may be skipped (they count as stored). A refusal
   * (TH_ERR_RESOURCE_EXHAUSTED when it is busy, any error) means nothing of t is stored and no
   * completion follows. The host calls it after each step, with the blocks that step completed and the
   * prefix cache published. */
  th_status (*save)(th_instance *instance, const th_kv_transfer *t, th_error *err);

  /* Writes the stored blocks of t's keys into t's blocks, which the host reserved for them and does not
   * touch until poll() reports t->ticket: writing may happen later, on the connector's threads. The
   * completion's n_done counts the leading blocks written and verified (a block that fails its checks
   * is never written as valid: it and those after it are left to be computed). A refusal means no
   * completion follows and nothing was written. The host calls it when contains() found blocks for a
   * request that just arrived; the sequence waits (TH_SEQ_LOADING, th_scheduler.h) until completion. */
  th_status (*load)(th_instance *instance, const th_kv_transfer *t, th_error *err);

  /* Reports finished transfers, each once: writes at most capacity completions to out and sets *n_out.
   * The host calls it between steps while transfers are out, and after each step. */
  void (*poll)(th_instance *instance, th_kv_completion *out, uint32_t capacity, uint32_t *n_out);

  /* Asks the connector to give up a load or save (the request went away). Its completion still
   * follows (status TH_ERR_NOT_FOUND when given up, or as it ended): the host frees a load's blocks only
   * then. Unknown tickets are ignored. */
  void (*cancel)(th_instance *instance, uint64_t ticket);

  /* Totals (see th_kv_connector_stats). */
  void (*stats)(th_instance *instance, th_kv_connector_stats *out);

  /* OPTIONAL (NULL: the connector takes no messages). A message another instance of this plugin, on
   * the engine named from, sent here with th_host_api.peer_send; an answer goes back with
   * peer_send(from). Host 1.9 calls it on the worker's thread between steps, in the order one sender
   * sent. The bytes are whatever the sender wrote: check everything before trusting a size in them.
   * OWNERSHIP: from and bytes are the host's, valid during the call only: copy what you keep. */
  void (*receive)(th_instance *instance, const char *from, const void *bytes, size_t n_bytes);
} th_kv_connector_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_KV_CONNECTOR_H */
