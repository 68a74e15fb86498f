/*
 * tokenhost plugin ABI: mixture-of-experts plugins (TH_KIND_MOE).
 *
 * A moe plugin owns three steps of an MoE layer: gating (which experts each token goes to and with what
 * weight), expert compute (the SwiGLU feed-forward of the chosen experts, weighted and summed), and
 * expert load balancing (where experts should live across devices given the load seen).
 */
#ifndef TOKENHOST_TH_MOE_H
#define TOKENHOST_TH_MOE_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OWNERSHIP of every pointer: host, valid during the call. */
typedef struct th_moe_gate_args {
  uint32_t struct_size;
  uint32_t layer;
  uint32_t n_tokens;
  uint32_t n_experts;
  uint32_t k;                 /* experts per token */
  const float *logits;        /* [n_tokens][n_experts] router logits */
  int32_t *expert_ids;        /* out: [n_tokens][k] chosen experts */
  float *expert_weights;      /* out: [n_tokens][k] their weights */
} th_moe_gate_args;

/* Expert e's weights: gate and up are [ffn_dim rows][dim], down is [dim rows][ffn_dim]
 * (th_tensor with ne[0] = inner dimension). */
typedef struct th_moe_expert_weights {
  th_tensor gate;
  th_tensor up;
  th_tensor down;
} th_moe_expert_weights;

typedef struct th_moe_experts_args {
  uint32_t struct_size;
  uint32_t layer;
  uint32_t n_tokens;
  uint32_t dim;
  uint32_t ffn_dim;
  uint32_t n_experts;
  uint32_t k;
  const float *x;                         /* [n_tokens][dim] normalized input */
  const int32_t *expert_ids;              /* [n_tokens][k] from gate() */
  const float *expert_weights;            /* [n_tokens][k] */
  const th_moe_expert_weights *experts;   /* [n_experts] */
  const th_moe_expert_weights *shared_expert; /* optional: applied to every token with weight 1. Host 1.2
                                                  passes NULL: it runs a model's shared expert on its own
                                                  kernels (the README's MoE section) */
  float *out;                             /* out: [n_tokens][dim] = sum_k w * expert(x) (+ shared) */
} th_moe_experts_args;

/* Load seen per expert and the current placement of one layer, to rebalance (host 1.10: an engine's
 * expert partitions are its devices; the README's "Expert parallelism").
 *
 * Slots (ABI 1.10): each device holds slots_per_device expert slots, slot s of device d at
 * slot_expert[d * slots_per_device + s] (-1: empty). An expert may hold slots on several devices
 * (replicas): the host splits its tokens among them, in token order, round robin. */
typedef struct th_moe_load {
  uint32_t struct_size;
  uint32_t layer;
  uint32_t n_experts;
  uint32_t n_devices;
  const uint64_t *tokens_per_expert; /* [n_experts] tokens routed since the last rebalance */
  const int32_t *placement;          /* [n_experts] device of each expert now (its first slot's device) */
  /* ABI 1.10: */
  uint32_t slots_per_device;         /* at least ceil(n_experts / n_devices) */
  const int32_t *slot_expert;        /* [n_devices * slots_per_device] the expert in each slot now */
  const double *device_seconds;      /* [n_devices] seconds each device spent in experts() of this
                                        layer since the last rebalance (its straggler time) */
} th_moe_load;

/* What rebalance() answers. Either slots (ABI 1.10: slot_expert, which the host fills with -1 before the
 * call) or, when every slot is left -1 (a plugin built before 1.10, or one that places without
 * replicas), placement: one device per expert, any number of experts per device. The host checks the
 * answer before it applies it (every expert placed, every id and device in range) and keeps the
 * current placement when it is wrong, logging why. */
typedef struct th_moe_placement {
  uint32_t struct_size;
  int32_t *placement;     /* out: [n_experts] device for each expert; OWNERSHIP: host */
  int32_t changed;        /* out: non-zero when the answer differs from the current placement */
  /* ABI 1.10: */
  int32_t *slot_expert;   /* out: [n_devices * slots_per_device] expert per slot, -1 empty; OWNERSHIP: host */
} th_moe_placement;

typedef struct th_moe_vtable {
  /* th_vtable_head, repeated flat. check() refuses dense models (n_experts == 0). */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  th_status (*gate)(th_instance *instance, const th_moe_gate_args *args, th_error *err);
  /* Choices of weight 0 are not computed (a capacity's drops; host 1.10 also gives each expert
   * partition the step's choices with the others' weights set to 0). With expert partitions (host 1.10,
   * plugins built against 1.10 or later only) the host calls experts() from one thread per partition at
   * once, each call with its own args: the plugin's instance must take concurrent experts() calls. */
  th_status (*experts)(th_instance *instance, const th_moe_experts_args *args, th_error *err);
  /* OPTIONAL (may be NULL: the placement stays as the engine started). Called by host 1.10 only for an
   * engine with expert partitions, between steps, every expert_rebalance_steps steps, once per MoE
   * layer (hosts before 1.10 never call it). */
  th_status (*rebalance)(th_instance *instance, const th_moe_load *load, th_moe_placement *out,
                         th_error *err);
} th_moe_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_MOE_H */
