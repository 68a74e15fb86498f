/*
 * tokenhost plugin ABI: common definitions shared by every plugin kind.
 *
 * C99, <stdint.h> and <stddef.h> only, so a plugin can be built by any compiler without the host's
 * source. Rules that hold for every header of the SDK:
 *
 *  - VERSIONS. The host loads a plugin whose descriptor has the same ABI major as the host and an ABI
 *    minor lower than or equal to the host's. Anything else is refused with both versions in the message.
 *  - GROWTH. Structs and vtables only grow at the end, and every minor that appends a member bumps
 *    TH_ABI_VERSION_MINOR. Every struct that crosses the boundary starts with `uint32_t struct_size`,
 *    set by whoever fills the struct; a reader only touches members that lie wholly inside struct_size
 *    (TH_HAS_MEMBER below): a plugin built against an older minor never sees a member it does not
 *    know, and the host never calls or reads one. A vtable must cover the vtable of the minor its
 *    descriptor declares (its size is recorded per minor by the host); a shorter one is refused at
 *    load with both sizes in the message. Members documented "optional" may be NULL. Structs passed as
 *    array elements (th_sched_seq, th_route_candidate, ...) have no struct_size and are fixed for an
 *    ABI major: later minors add per-element data as parallel arrays in the (growable) struct that
 *    holds the array. Output structs are filled by the callee, which sets struct_size.
 *
 *    Worked example. Minor 1.N appends an optional `float (*score)(th_instance *)` to
 *    th_router_vtable (48 bytes through 1.N-1, 56 from 1.N). A router built against 1.N-1 declares
 *    that minor and a 48-byte vtable: the host accepts it (48 covers 1.N-1's 48) and, since 48 does
 *    not cover `score`, treats score as NULL. A router built against 1.N declares 1.N and 56 bytes. A
 *    router that declares 1.N with a 48-byte vtable is refused: "vtable struct_size 48 is smaller than
 *    the ABI 1.N router vtable (56 bytes)". In the other direction, a 1.N plugin reading a struct the
 *    host fills (th_host_api, th_attention_batch, ...) tests TH_HAS_MEMBER before a 1.N member when it
 *    may run on an older host; the host it loads into is never older than its declared minor.
 *  - ERRORS. Every call that can fail returns th_status. A message goes through the host's
 *    `error_set` callback (th_host_api.h), which copies it. No C++ exception crosses the boundary.
 *  - MEMORY. No allocation crosses the boundary: whoever allocates frees. Each pointer member says who
 *    owns it and how long it stays valid (OWNERSHIP).
 *  - THREADING. A plugin instance belongs to exactly one host actor and is never called from two
 *    threads at once; different instances of one plugin may be called concurrently. Functions that do
 *    not take an instance (entry, check) may be called from any thread, concurrently.
 */
#ifndef TOKENHOST_TH_COMMON_H
#define TOKENHOST_TH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version of these headers. A plugin records the version it was built against in its descriptor.
 * History (each minor's headers are frozen under the host's tests/abi/<major.minor>/, with a fixture
 * plugin of every kind built against them that the host must load and serve):
 *   1.0  the first.
 *   1.1  appended th_host_api.parallel_for and compute_threads.
 *   1.2  the growth rule enforced per minor (a vtable is checked against its declared minor's size;
 *        members past a struct_size are never called nor read); appended th_kv_layout.device and
 *        device_index, and th_attention_batch.device and device_index (where the buffers live).
 *   1.3  appended th_sched_state.seq_clients (the client of each sequence, for fair sharing).
 *   1.4  speculative decoding: appended th_kvcache_vtable.seq_truncate (rolling back rejected drafts),
 *        th_spec_propose_args.seq_max_draft (each sequence's bound) and the draft distributions that
 *        opt a draft into speculative sampling (dist_capacity, dist_tokens, dist_probs, dist_len),
 *        th_sched_state.seq_draft and th_sched_decision.run_draft (draft tokens offered and granted),
 *        th_attention_batch.row_parent (tree attention: verifying a tree of draft tokens).
 *   1.5  draft sessions: appended th_host_api.draft_open, draft_append, draft_rollback, draft_run and
 *        draft_close (a proposer runs another model of the deployment, or the engine's own first
 *        layers, with a KV cache the host keeps per session); prefix caching: appended
 *        th_kvcache_vtable.seq_lookup, seq_publish and cache_flush (optional together),
 *        th_kv_stats.cached_blocks, held_blocks, evicted_blocks and published_blocks,
 *        th_sched_state.seq_cached (prompt positions found cached) and th_route_request.cached_tokens
 *        (each candidate engine's cached overlap with the prompt, for cache-aware routing).
 *   1.6  8-bit KV and sliding windows: an engine's kv_dtype may be TH_DTYPE_Q8_0; the host then
 *        writes keys and values quantized through th_kv_layout.quant_group and its scale members, and
 *        attention plugins read them (an engine with a q8_0 cache takes kvcache and attention plugins
 *        built against 1.6 or later); appended th_kvcache_vtable.seq_drop_blocks (OPTIONAL: a sliding
 *        window's release of a sequence's oldest blocks).
 *   1.7  many models as one: model groups give th_route_candidate.cost_per_mtok and quality their
 *        declared figures; appended th_route_request.max_tokens, cache_namespace, params_key,
 *        deterministic, request_class and payer, th_route_decision.check_every, cached_tokens,
 *        n_cached_tokens, cached_stop and n_samples, th_route_feedback.prompt_tokens through signal,
 *        th_router_vtable.escalate (OPTIONAL: cascades escalate on the confidence signal,
 *        th_route_signal) and select (OPTIONAL: ensembles, TH_ROUTE_ENSEMBLE); TH_ROUTE_CACHED is
 *        served (as tokens).
 *   1.8  nodes: appended th_route_request.candidate_nodes and candidate_rtt_s (parallel to candidates:
 *        the cluster node each candidate runs on and the head's round trip to it).
 *   1.9  KV connectors: the kind TH_KIND_KV_CONNECTOR (th_kv_connector.h: blocks saved to and loaded
 *        from a tier or another engine, asynchronously, keyed by the host); th_seq_state
 *        TH_SEQ_LOADING (a sequence whose cached prefix a connector is writing into its blocks, shown
 *        to schedulers built against 1.9 or later; older ones never see such a sequence);
 *        prefill/decode disaggregation: th_engine_role, th_route_request.candidate_roles and the
 *        router action TH_ROUTE_DISAGGREGATE (th_router.h); messages between a connector's instances
 *        on different engines: th_host_api.peer_send and th_kv_connector_vtable.receive.
 *   1.10 MoE at full strength: appended th_host_api.grouped_matmul (th_grouped_matmul_args: groups of
 *        rows through weights of their own, any weight type the host's kernels take, so that a moe
 *        plugin computes quantized experts on the host's kernels) and th_model_info.expert_weights_norm
 *        (whether the model renormalizes each token's top-k expert weights, from its metadata);
 *        expert parallelism: th_moe_load.slots_per_device, .slot_expert and .device_seconds,
 *        th_moe_placement.slot_expert (replicas of an expert on several devices), and
 *        th_moe_vtable.rebalance called (engines with expert partitions).
 *   1.11 structured output: the kind TH_KIND_CONSTRAINT (th_constraint.h: the tokens a sequence may
 *        take next under a request's JSON Schema, JSON object or grammar, applied by the host before
 *        sampling, draft rows included); appended th_create_args.vocab (th_vocab: the bytes of every
 *        token of the engine's model). */
#define TH_ABI_VERSION_MAJOR 1
#define TH_ABI_VERSION_MINOR 11

/* Bytes from the start of `type` through the end of `member`: the struct_size a struct must have for
 * member to be present. */
#define TH_SIZE_THROUGH(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))
/* Whether the struct at ptr (of `type`, struct_size set by whoever filled it) holds member. */
#define TH_HAS_MEMBER(ptr, type, member) ((size_t)(ptr)->struct_size >= TH_SIZE_THROUGH(type, member))

/* ---- status codes ------------------------------------------------------------------------------- */

typedef int32_t th_status;
#define TH_OK 0
#define TH_ERR_INVALID_ARGUMENT 1   /* a caller's argument or configuration value is wrong */
#define TH_ERR_UNSUPPORTED 2        /* cannot serve this model / device / dtype / request */
#define TH_ERR_OUT_OF_MEMORY 3      /* an allocation failed */
#define TH_ERR_RESOURCE_EXHAUSTED 4 /* a bounded pool (KV blocks, slots) has no room now; retry later */
#define TH_ERR_NOT_FOUND 5          /* a key, sequence or object does not exist */
#define TH_ERR_INTERNAL 6           /* a bug or an unexpected failure inside the callee */

/* ---- plugin kinds ------------------------------------------------------------------------------- */

typedef int32_t th_kind;
#define TH_KIND_ATTENTION 1   /* th_attention.h */
#define TH_KIND_KVCACHE 2     /* th_kvcache.h */
#define TH_KIND_MOE 3         /* th_moe.h */
#define TH_KIND_SPEC_DECODE 4 /* th_spec_decode.h */
#define TH_KIND_SCHEDULER 5   /* th_scheduler.h */
#define TH_KIND_ROUTER 6      /* th_router.h */
#define TH_KIND_KV_CONNECTOR 7 /* th_kv_connector.h (ABI 1.9) */
#define TH_KIND_CONSTRAINT 8   /* th_constraint.h (ABI 1.11) */

/* ---- element types (numbering follows GGUF's ggml_type so model files map one to one) ----------- */

typedef int32_t th_dtype;
#define TH_DTYPE_F32 0
#define TH_DTYPE_F16 1
#define TH_DTYPE_Q4_0 2  /* blocks of 32: one f16 scale + 16 bytes of 4-bit values */
#define TH_DTYPE_Q8_0 8  /* blocks of 32: one f16 scale + 32 int8 values */
#define TH_DTYPE_Q4_K 12 /* super-blocks of 256 with 6-bit sub-block scales and mins */
#define TH_DTYPE_Q6_K 14 /* super-blocks of 256 with 8-bit sub-block scales */
#define TH_DTYPE_I8 24
#define TH_DTYPE_I32 26
#define TH_DTYPE_BF16 30

/* ---- devices ----------------------------------------------------------------------------------- */

typedef int32_t th_device_kind;
#define TH_DEVICE_CPU 0
#define TH_DEVICE_CUDA 1

typedef struct th_device {
  uint32_t struct_size;
  th_device_kind kind;
  int32_t index;    /* device ordinal within its kind; 0 for the CPU */
  const char *name; /* OWNERSHIP: host; valid for the duration of the call that received it */
  uint64_t memory_bytes; /* total memory of the device, 0 if unknown */
  uint32_t threads;      /* compute threads the host gives this device (CPU) */
} th_device;

/* ---- opaque handles ---------------------------------------------------------------------------- */

/* One plugin instance. Defined by the plugin, created by its vtable's create(), destroyed by destroy(). */
typedef struct th_instance th_instance;
/* Host-side context of one instance (the engine and slot it serves: used for logs and metric labels). */
typedef struct th_host_ctx th_host_ctx;
/* Host-side error collector passed to every fallible call; see th_host_api.error_set. */
typedef struct th_error th_error;
/* Host-side, read-only view of the plugin's configuration table (manifest defaults merged with the
 * engine's settings); read it through th_host_api.config_get_*. */
typedef struct th_config th_config;

/* ---- tensors ----------------------------------------------------------------------------------- */

/* A strided view of up to 4 dimensions, ggml-style: ne[0] is the innermost (contiguous) dimension.
 * For block-quantized dtypes ne[0] counts elements and nb[1..] are byte strides between rows. */
typedef struct th_tensor {
  uint32_t struct_size;
  th_dtype dtype;
  uint32_t n_dims;
  int64_t ne[4];    /* elements per dimension; unused dimensions are 1 */
  int64_t nb[4];    /* byte stride per dimension */
  void *data;       /* OWNERSHIP: whoever built the view; see the struct that carries it */
  th_device_kind device;
} th_tensor;

/* ---- model description ------------------------------------------------------------------------- */

/* What a plugin is asked to serve: the hyperparameters of the model of its engine. */
typedef struct th_model_info {
  uint32_t struct_size;
  const char *architecture; /* "llama", "qwen2", ...; OWNERSHIP: host, valid during the call */
  uint32_t n_layers;
  uint32_t dim;        /* embedding width */
  uint32_t n_heads;    /* query heads */
  uint32_t n_kv_heads; /* key/value heads (GQA when < n_heads, MQA when 1) */
  uint32_t head_dim;
  uint32_t ffn_dim;    /* feed-forward width (per expert for MoE models) */
  uint32_t vocab_size;
  uint32_t context_len;
  uint32_t n_experts;      /* 0 for dense models */
  uint32_t n_experts_used; /* experts per token; 0 for dense models */
  th_dtype weight_dtype;   /* dominant weight type */
  th_dtype act_dtype;      /* activation type the runtime computes in */
  th_dtype kv_dtype;       /* element type of the KV cache */
  /* ABI 1.10, MoE models: TH_EXPERT_WEIGHTS_NORMALIZED when the model renormalizes each token's top-k
   * expert weights to sum to 1 (Mixtral, Qwen3-MoE), TH_EXPERT_WEIGHTS_SOFTMAX when it keeps their
   * softmax probabilities (Qwen2-MoE), from the file's <arch>.expert_weights_norm or its architecture;
   * TH_EXPERT_WEIGHTS_UNSTATED from a host before 1.10 (whose struct_size covers this member's
   * padding) and for dense models. */
  int32_t expert_weights_norm;
} th_model_info;

#define TH_EXPERT_WEIGHTS_UNSTATED 0
#define TH_EXPERT_WEIGHTS_NORMALIZED 1
#define TH_EXPERT_WEIGHTS_SOFTMAX 2

/* ---- check and create -------------------------------------------------------------------------- */

/* What check() is asked: can this plugin serve this model on this device with this configuration? */
typedef struct th_check_query {
  uint32_t struct_size;
  const th_model_info *model; /* OWNERSHIP: host, valid during the call */
  const th_device *device;    /* OWNERSHIP: host, valid during the call */
  const th_config *config;    /* OWNERSHIP: host, valid during the call */
} th_check_query;

/* ABI 1.11. The vocabulary of a model: the bytes each token stands for in generated text (SentencePiece's
 * "\xe2\x96\x81" as a space, byte tokens as their byte, byte-level BPE's mapping undone), token t's
 * being bytes[offsets[t] .. offsets[t + 1]). attrs[t] is TH_TOKEN_CONTROL for tokens that stand for
 * no text (BOS, EOS, other control and unused tokens: their bytes are empty), else TH_TOKEN_TEXT.
 * OWNERSHIP: host; valid until destroy() of the instance that received it returns. */
typedef struct th_vocab {
  uint32_t struct_size;
  uint32_t n_tokens;
  const uint8_t *bytes;
  const uint32_t *offsets; /* [n_tokens + 1] */
  const uint8_t *attrs;    /* [n_tokens] */
  int32_t eos;             /* the end-of-generation token, -1 when the model has none */
} th_vocab;

#define TH_TOKEN_TEXT 0
#define TH_TOKEN_CONTROL 1

/* What create() is given. */
typedef struct th_create_args {
  uint32_t struct_size;
  th_host_ctx *host_ctx;      /* OWNERSHIP: host; valid until destroy() of the instance returns */
  const th_config *config;    /* OWNERSHIP: host; valid during create() only: copy what you keep */
  const th_model_info *model; /* OWNERSHIP: host; valid during create() only */
  const th_device *device;    /* OWNERSHIP: host; valid during create() only */
  /* ABI 1.11. The engine's vocabulary for every kind; NULL when the model has none (a synthetic shape)
   * and from a host before 1.11 (whose struct_size ends before this member). */
  const th_vocab *vocab;
} th_create_args;

/* The three members every kind's vtable starts with, in this order (each vtable repeats them so that
 * a vtable is one flat struct; th_vtable_head lets the host read them without knowing the kind). */
typedef struct th_vtable_head {
  uint32_t struct_size;
  /* REQUIRED. Makes an instance. On failure returns a status, sets *out to NULL and reports why.
   * OWNERSHIP: *out is the plugin's until destroy(). THREADING: any thread, concurrently. */
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  /* REQUIRED. Frees an instance and everything it allocated. Never fails. */
  void (*destroy)(th_instance *instance);
  /* REQUIRED. Says whether the plugin can serve query. Returns TH_OK when it can; otherwise
   * TH_ERR_UNSUPPORTED (or TH_ERR_INVALID_ARGUMENT for a bad config) after one error_set call per
   * reason. THREADING: any thread, concurrently; it must not depend on any instance. */
  th_status (*check)(const th_check_query *query, th_error *err);
} th_vtable_head;

/* ---- descriptor and entry point ---------------------------------------------------------------- */

typedef struct th_plugin_descriptor {
  uint32_t struct_size;  /* sizeof(th_plugin_descriptor) as the plugin was built */
  uint16_t abi_major;    /* TH_ABI_VERSION_MAJOR the plugin was built against */
  uint16_t abi_minor;    /* TH_ABI_VERSION_MINOR the plugin was built against */
  th_kind kind;
  const char *id;        /* "<kind>.<name>", e.g. "scheduler.fifo" */
  const char *version;   /* the plugin's own version, semantic versioning, e.g. "1.2.0" */
  const void *vtable;    /* points to the th_<kind>_vtable of kind; starts with th_vtable_head */
} th_plugin_descriptor;
/* OWNERSHIP of the descriptor and everything it points to: the plugin's image; valid until the library
 * is closed. The host copies the strings it keeps. */

struct th_host_api;

/* The one symbol a plugin library exports. The host calls it once after loading the library, before
 * anything else, with its API table, which stays valid until the library is closed. It returns the
 * descriptor, or NULL when the plugin cannot run on this host (after logging why through host->log). */
#define TH_PLUGIN_ENTRY_SYMBOL "tokenhost_plugin_entry"
typedef const th_plugin_descriptor *(*th_plugin_entry_fn)(const struct th_host_api *host);

#if defined(_WIN32)
#define TH_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TH_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_COMMON_H */
