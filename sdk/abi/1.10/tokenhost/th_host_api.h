/*
 * tokenhost plugin ABI: the services the host offers to plugins.
 *
 * The host passes one th_host_api table to the plugin's entry point; it stays valid until the library
 * is closed. Members are only ever appended: check struct_size (or the host's abi_minor) before using
 * a member added after 1.0.
 */
#ifndef TOKENHOST_TH_HOST_API_H
#define TOKENHOST_TH_HOST_API_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Log levels, from most to least verbose; they map onto the host's spdlog levels. */
typedef int32_t th_log_level;
#define TH_LOG_TRACE 0
#define TH_LOG_DEBUG 1
#define TH_LOG_INFO 2
#define TH_LOG_WARN 3
#define TH_LOG_ERROR 4

typedef int32_t th_metric_type;
#define TH_METRIC_COUNTER 0   /* monotonically increasing total */
#define TH_METRIC_GAUGE 1     /* a value that goes up and down */
#define TH_METRIC_HISTOGRAM 2 /* a distribution over fixed buckets */

/* One metric family owned by the host. Every series the plugin records is also labelled by the host
 * with the engine (and A/B arm) of the instance that created it. */
typedef struct th_metric th_metric;

typedef struct th_metric_desc {
  uint32_t struct_size;
  th_metric_type type;
  const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*; the host prefixes "tokenhost_plugin_" */
  const char *help;  /* one line shown in the exposition */
  const char *const *label_names; /* optional; n_labels names, [a-zA-Z_][a-zA-Z0-9_]* each */
  uint32_t n_labels;
  const double *buckets; /* histograms: optional ascending upper bounds; NULL = host defaults */
  uint32_t n_buckets;
} th_metric_desc;
/* OWNERSHIP of everything in th_metric_desc: the caller; the host copies it during metric_create. */

/* Model-run request for the "run another loaded model" service (draft models, cascades). */
typedef struct th_model_run_request {
  uint32_t struct_size;
  const char *model;      /* name of a model loaded by the deployment */
  const int32_t *tokens;  /* prompt token ids; OWNERSHIP: caller, valid during the call */
  uint32_t n_tokens;
  uint32_t max_new_tokens;
  float temperature;      /* 0 = greedy */
  uint64_t seed;
} th_model_run_request;

typedef struct th_model_run_result {
  uint32_t struct_size;
  int32_t *tokens;        /* OWNERSHIP: caller-allocated buffer of `capacity` entries; host fills it */
  uint32_t capacity;
  uint32_t n_tokens;      /* out: tokens written */
} th_model_run_result;

/* The most bytes one th_host_api.peer_send message carries (ABI 1.9). */
#define TH_PEER_MESSAGE_MAX_BYTES ((size_t)64 << 20)

/* ---- draft sessions (ABI 1.5) ----
 * A draft session is one sequence of a model the host runs for a plugin: a speculative decoding
 * proposer's draft model, or the engine's own model cut after its first layers (self-speculation). The
 * plugin appends the sequence's tokens, asks for the model's greedy continuation (draft_run, many
 * sessions in one batched call), and rolls back what the target rejected. The host keeps each
 * session's keys and values in a KV pool of its own per engine and draft model, made with the engine's
 * kvcache and attention plugins and kv_dtype, and runs the model on the engine's device and compute
 * threads. Drafted tokens' keys and values are kept past the session's tokens: appending the ones the
 * target accepted reuses them instead of computing them again. */
typedef struct th_draft_session th_draft_session; /* OWNERSHIP: the host's, until draft_close */

typedef struct th_draft_open_args {
  uint32_t struct_size;
  const char *model;  /* a model of the deployment ([models.X]) with the engine's vocabulary size;
                       * NULL or "": the engine's own model */
  uint32_t n_layers;  /* 0: every layer; else only the first n_layers (<= the model's), then its output
                       * norm and head: early exit, no weights beyond the model's own */
} th_draft_open_args;

typedef struct th_draft_run_args {
  uint32_t struct_size;
  uint32_t n_sessions;
  th_draft_session *const *sessions; /* [n_sessions]: distinct, open, opened by the calling instance,
                                      * each holding at least one token */
  const uint32_t *n_draft;           /* [n_sessions]: tokens to draft after each, <= max_draft */
  uint32_t max_draft;                /* entries per session in tokens and probs; 1..64 */
  float min_prob;  /* a session's draft stops before its first token whose probability under the model
                    * (softmax of its logits) is below min_prob; 0: never */
  int32_t *tokens;     /* out [n_sessions * max_draft]: session k's draft at tokens[k * max_draft ...] */
  float *probs;        /* out, optional (NULL): each written token's probability under the model */
  uint32_t *n_written; /* out [n_sessions]: tokens written for each (fewer than asked at min_prob, at the
                        * model's context, or 0 when the draft KV pool has no room for the session) */
} th_draft_run_args;
/* OWNERSHIP of everything in th_draft_open_args and th_draft_run_args: the caller, valid during the call. */

/* ---- grouped matrix products (ABI 1.10) ----
 * Groups of activation rows, each through weight matrices of its own: an MoE layer's experts, each
 * applied to the tokens routed to it (the plugin orders the tokens by expert), each expert's weights
 * read once for all of its rows. */
typedef struct th_grouped_matmul_args {
  uint32_t struct_size;
  uint32_t n_groups;
  uint32_t n_products;       /* 1..4 products per group that share its input rows (an expert's gate and up) */
  uint32_t cols;             /* elements per input row: every weight's ne[0] */
  const th_tensor *weights;  /* [n_groups * n_products]: group g's product j at [g * n_products + j], a
                              * [rows_j][cols] matrix (ne[0] = cols, ne[1] = rows_j, the same rows_j for
                              * every group, rows nb[1] bytes apart, as the type packs them), all of one
                              * dtype: f32, f16, bf16, q8_0, q4_0, q4_K or q6_K (cols a multiple of the
                              * type's block: 32, or 256 for the K-quants), on the engine's device */
  const uint32_t *row_begin; /* [n_groups + 1]: group g takes input rows [row_begin[g], row_begin[g + 1]);
                              * row_begin[0] = 0, non-decreasing; a group may be empty (its weights unread) */
  const float *x;            /* [row_begin[n_groups]][cols] input rows */
  float *const *y;           /* [n_products]: product j writes y[j], [row_begin[n_groups]][rows_j] */
} th_grouped_matmul_args;
/* OWNERSHIP of everything in th_grouped_matmul_args: the caller, valid during the call. */

typedef struct th_host_api {
  uint32_t struct_size;
  uint16_t abi_major; /* the host's ABI version */
  uint16_t abi_minor;
  const char *host_version; /* e.g. "0.1.0"; OWNERSHIP: host, static */

  /* ---- errors and logging ---- */

  /* Appends one message to err (the host copies it; a call may append several, e.g. one per check()
   * reason). err may be NULL, then it does nothing. THREADING: the thread of the call that got err. */
  void (*error_set)(th_error *err, const char *message);
  /* Writes one log line tagged with the plugin and its engine. ctx may be NULL (entry point, check()).
   * THREADING: any thread. */
  void (*log)(th_host_ctx *ctx, th_log_level level, const char *message);

  /* ---- typed configuration look-up ----
   * key is a plain key of the plugin's config table, or a dotted path into sub-tables ("a.b").
   * Return TH_ERR_NOT_FOUND when absent, TH_ERR_INVALID_ARGUMENT when the value has another type
   * (an integer is accepted where a double is asked). THREADING: any thread; config is read-only. */
  th_status (*config_get_int)(const th_config *config, const char *key, int64_t *out);
  th_status (*config_get_double)(const th_config *config, const char *key, double *out);
  th_status (*config_get_bool)(const th_config *config, const char *key, int32_t *out);
  /* Copies the string (NUL-terminated) into buf when it fits; *needed is set to its length + 1
   * either way. Returns TH_ERR_RESOURCE_EXHAUSTED when buf_size < *needed. buf may be NULL to ask. */
  th_status (*config_get_string)(const th_config *config, const char *key, char *buf,
                                 size_t buf_size, size_t *needed);

  /* ---- metrics ----
   * metric_create registers a family for the instance of ctx (the same name twice returns the same
   * family if its type and labels match, else TH_ERR_INVALID_ARGUMENT). OWNERSHIP: *out is the host's;
   * valid until the instance of ctx is destroyed. label_values has the family's n_labels values (NULL
   * when it has none); the host copies them. THREADING: the instance's thread. */
  th_status (*metric_create)(th_host_ctx *ctx, const th_metric_desc *desc, th_metric **out,
                             th_error *err);
  void (*metric_add)(th_metric *metric, const char *const *label_values, double delta);    /* counter */
  void (*metric_set)(th_metric *metric, const char *const *label_values, double value);    /* gauge */
  void (*metric_observe)(th_metric *metric, const char *const *label_values, double value); /* histogram */

  /* ---- memory ----
   * Allocates bytes on device (TH_DEVICE_CPU: host memory; TH_DEVICE_CUDA: device memory, or
   * TH_ERR_UNSUPPORTED where the host has no such device). alignment is a power of two (0 = 64).
   * The memory is accounted to the instance of ctx. OWNERSHIP: the plugin must free it with mem_free
   * before destroy() returns. THREADING: any thread. */
  th_status (*mem_alloc)(th_host_ctx *ctx, th_device_kind device, int32_t device_index, size_t bytes,
                         size_t alignment, void **out, th_error *err);
  void (*mem_free)(th_host_ctx *ctx, void *ptr);

  /* ---- running another loaded model (draft models, cascades) ----
   * Runs request to completion on another model of the deployment. Returns TH_ERR_UNSUPPORTED when
   * the host has no model runtime for it. Reserved: host 1.6 always returns TH_ERR_UNSUPPORTED (with
   * a message); draft sessions (below) run another model step by step. THREADING: the instance's thread; blocks until done. */
  th_status (*model_run)(th_host_ctx *ctx, const th_model_run_request *request,
                         th_model_run_result *result, th_error *err);

  /* ---- compute threads (ABI 1.1) ----
   * Runs fn(arg, begin, end) over [0, n) on the host's compute pool, the threads its own dense math
   * (projections, MLP) runs on between plugin calls (the instance's engine's compute partition where
   * the manifest gives it one, else the process-wide pool; in a moe plugin's experts() over an engine's
   * expert partitions, 1.10, that partition's): a plugin that splits its work there does not
   * oversubscribe the cores with threads of its own, and finds the threads awake. The range is cut
   * into pieces of `grain` indices, which the threads claim in order as they finish the previous one
   * (grain 0: one piece of equal size per thread). At most max_threads threads take part, the calling
   * thread included (0: all of them). Returns when every piece is done. fn may run on several threads
   * at once; it must not throw (C++) nor call parallel_for. ctx may be NULL.
   * OWNERSHIP: arg is the caller's; the host only passes it to fn. THREADING: the thread of the plugin
   * call it is made from (calls from several instances take turns on the pool). */
  void (*parallel_for)(th_host_ctx *ctx, size_t n, size_t grain, uint32_t max_threads,
                       void (*fn)(void *arg, size_t begin, size_t end), void *arg);
  /* Threads parallel_for runs fn on at most (for ctx's pool), the calling one included. THREADING: any
   * thread. */
  uint32_t (*compute_threads)(th_host_ctx *ctx);

  /* ---- draft sessions (ABI 1.5; see th_draft_session above) ----
   * Offered to the instances of an engine's spec_decode slot; any other instance (and a host built
   * before 1.5: check TH_HAS_MEMBER) gets TH_ERR_UNSUPPORTED. THREADING: the instance's thread; the
   * calls that compute (draft_run) block until done. A session belongs to the instance that opened it;
   * the host closes those still open when the instance is destroyed (and logs it). */
  /* Opens a session with no tokens. TH_ERR_NOT_FOUND: no such model; TH_ERR_INVALID_ARGUMENT: another
   * vocabulary size than the engine's, or n_layers above the model's; TH_ERR_UNSUPPORTED: see above.
   * The first session of a model and n_layers makes its KV pool (and may take a while). */
  th_status (*draft_open)(th_host_ctx *ctx, const th_draft_open_args *args, th_draft_session **out,
                          th_error *err);
  /* Appends tokens to the session (computed at its next draft_run). TH_ERR_INVALID_ARGUMENT for a
   * token outside the vocabulary, TH_ERR_RESOURCE_EXHAUSTED when the session would reach the model's
   * context; nothing is appended then. */
  th_status (*draft_append)(th_draft_session *session, const int32_t *tokens, uint32_t n_tokens, th_error *err);
  /* Keeps the session's first n_tokens tokens. TH_ERR_INVALID_ARGUMENT when it holds fewer. */
  th_status (*draft_rollback)(th_draft_session *session, uint32_t n_tokens, th_error *err);
  /* Drafts args->n_draft[k] greedy tokens after the tokens of each session k, in batched forward passes
   * (the tokens appended since a session last ran first). Drafting does not append: the session's
   * tokens are what was appended. TH_ERR_INVALID_ARGUMENT for arguments outside the rules above (nothing
   * is drafted then); TH_ERR_INTERNAL when the model's forward pass fails (the sessions' caches are
   * dropped, their tokens kept). */
  th_status (*draft_run)(th_host_ctx *ctx, const th_draft_run_args *args, th_error *err);
  /* Closes the session and frees its keys and values. NULL is ignored. */
  void (*draft_close)(th_draft_session *session);

  /* ---- messages between KV connectors (ABI 1.9; th_kv_connector.h) ----
   * Sends n_bytes to the instances of the calling plugin (the same plugin id) in the kv_connector stack
   * of the engine named peer, through their receive() member: an engine of this process, or in a
   * cluster an engine of another node as ENGINE@NODE (a head's name for a worker's engine, and a
   * worker's for a head's: the receiver's `from` is the sender's name in that form), carried over the
   * cluster's authenticated links. The host copies the bytes during the call and delivers them later on
   * the peer engine's worker thread, between its steps, in order from one sender to one peer. Delivery
   * is not confirmed: a connector
   * that needs to know answers with a message of its own (the peer may have gone meanwhile, or have no
   * layer of the plugin; the host logs such a message and drops it). Offered to kv_connector
   * instances; any other instance (and a host built before 1.9: check TH_HAS_MEMBER) gets
   * TH_ERR_UNSUPPORTED. TH_ERR_NOT_FOUND: no engine of that name runs here and no linked node has that name; TH_ERR_INVALID_ARGUMENT: no
   * peer, or more than TH_PEER_MESSAGE_MAX_BYTES. OWNERSHIP: peer and bytes are the caller's, read
   * during the call only. THREADING: the instance's thread. */
  th_status (*peer_send)(th_host_ctx *ctx, const char *peer, const void *bytes, size_t n_bytes, th_error *err);

  /* ---- grouped matrix products (ABI 1.10; th_grouped_matmul_args above) ----
   * y[j][r] = weights[g * n_products + j] . x[r] for every row r of every group g, on the host's kernels
   * and compute threads (the engine's partition): the quantized types through integer dot products on
   * the input quantized to 8 bits per 32-element block, once per call, the others in f32. Each output
   * is computed as the host's own products compute it: a row's results do not depend on the other rows
   * of the call, nor on how they are grouped (batch invariance). A plugin that brings its own kernels
   * need not call it. TH_ERR_INVALID_ARGUMENT names what breaks the rules above (nothing is written
   * then); TH_ERR_UNSUPPORTED for weights on a device without a grouped product; a host built before
   * 1.10 lacks the member (check TH_HAS_MEMBER). THREADING: the instance's thread; blocks until done;
   * the calls of an engine's instances take turns on its compute threads. */
  th_status (*grouped_matmul)(th_host_ctx *ctx, const th_grouped_matmul_args *args, th_error *err);
} th_host_api;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_HOST_API_H */
