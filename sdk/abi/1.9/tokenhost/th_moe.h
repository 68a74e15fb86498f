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

/* Load seen per expert and the current placement, to rebalance. */
typedef struct th_moe_load {
  uint32_t struct_size;
  uint32_t layer;
  uint32_t n_experts;
  uint32_t n_devices;
  const uint64_t *tokens_per_expert; /* [n_experts] tokens routed since the last rebalance */
  const int32_t *placement;          /* [n_experts] device of each expert now */
} th_moe_load;

typedef struct th_moe_placement {
  uint32_t struct_size;
  int32_t *placement;     /* out: [n_experts] device for each expert; OWNERSHIP: host */
  int32_t changed;        /* out: non-zero when placement differs from the input */
} th_moe_placement;

typedef struct th_moe_vtable {
  /* th_vtable_head, repeated flat. check() refuses dense models (n_experts == 0). */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  th_status (*gate)(th_instance *instance, const th_moe_gate_args *args, th_error *err);
  th_status (*experts)(th_instance *instance, const th_moe_experts_args *args, th_error *err);
  /* OPTIONAL (may be NULL: placement never changes). Reserved: not called by host 1.6 (one device per
   * engine: there is nothing to place yet). */
  th_status (*rebalance)(th_instance *instance, const th_moe_load *load, th_moe_placement *out,
                         th_error *err);
} th_moe_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_MOE_H */
