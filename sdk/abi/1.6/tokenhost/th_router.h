/*
 * tokenhost plugin ABI: router plugins (TH_KIND_ROUTER).
 *
 * The router actor asks its router plugin which engine serves a request, after guards (rate limits,
 * circuit breakers) and the experiment split have narrowed the candidates. A router may answer with one
 * target, a cascade (try cheap engines first, escalate when the answer is not good enough) or an answer
 * it has cached.
 */
#ifndef TOKENHOST_TH_ROUTER_H
#define TOKENHOST_TH_ROUTER_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OWNERSHIP of every pointer: host, valid during the call. */
typedef struct th_route_candidate {
  const char *engine_id;
  const char *model;
  uint32_t running;       /* sequences running now */
  uint32_t waiting;       /* sequences queued; host 1.6 sets 0 (running counts the requests in flight) */
  double load;            /* 0 = idle, 1 = saturated; host 1.6: requests in flight / 64, at most 1 */
  double cost_per_mtok;   /* relative cost of a million output tokens; host 1.6 sets 1.0 */
  double quality;         /* relative quality score, higher is better; host 1.6 sets 1.0 */
  int32_t healthy;        /* 0 when a guard marked it unhealthy */
} th_route_candidate;

typedef struct th_route_request {
  uint32_t struct_size;
  uint64_t request_id;
  const char *model;        /* model the client asked for */
  const char *prompt;       /* prompt text (may be empty when only tokens are known; host 1.6 passes "") */
  size_t prompt_len;
  const int32_t *tokens;    /* prompt tokens, NULL when not yet tokenized */
  uint32_t n_tokens;
  const char *session_key;  /* sticky key (API key, user, session header); "" when none */
  const th_route_candidate *candidates; /* [n_candidates], never empty */
  uint32_t n_candidates;
  /* ABI 1.5, parallel to candidates (read it only when TH_HAS_MEMBER says it is there): how many of the
   * prompt's leading tokens each candidate likely holds in its prefix cache, so that serving the
   * request there prefills only the rest. Whole blocks only, fewer than n_tokens (the last token is
   * always computed); 0 for an engine whose kvcache plugin caches no prefixes, or whose cache holds
   * none of the prompt in the request's namespace (its API key and cache_salt). The host counts from
   * its own record of the blocks each engine published and was not told were evicted: an estimate,
   * never a promise. Host 1.6 always sets it. */
  const uint32_t *cached_tokens;
} th_route_request;

typedef int32_t th_route_action;
#define TH_ROUTE_TARGET 0   /* serve on candidates[target] */
#define TH_ROUTE_CASCADE 1  /* try cascade[0], escalate to cascade[1], ...; host 1.6 serves cascade[0]
                               only (no escalation yet) */
#define TH_ROUTE_CACHED 2   /* answer with cached_text, no engine runs. Reserved: host 1.6 fails the
                               request with a message saying it does not serve this action */

typedef struct th_route_decision {
  uint32_t struct_size;
  th_route_action action;
  uint32_t target;          /* TH_ROUTE_TARGET: index into candidates */
  uint32_t *cascade;        /* OWNERSHIP: host array with room for n_candidates indices */
  uint32_t n_cascade;
  const char *cached_text;  /* TH_ROUTE_CACHED; OWNERSHIP: plugin, valid until the next call on the
                               instance; the host copies it */
  size_t cached_len;
} th_route_decision;

/* What happened to a routed request, for routers that learn (latency-aware, semantic caches). */
typedef struct th_route_feedback {
  uint32_t struct_size;
  uint64_t request_id;
  const char *engine_id;
  int32_t ok;               /* 0 when the request failed */
  double ttft_s;            /* seconds from the request's arrival at its engine to its first token;
                               0 when no token came */
  double total_s;           /* seconds from routing to the answer */
  uint32_t tokens_in;
  uint32_t tokens_out;
  const char *output_text;  /* the generated text (output_len bytes, not NUL-terminated); NULL when the
                               host cannot detokenize; OWNERSHIP: host, valid during the call */
  size_t output_len;
} th_route_feedback;

typedef struct th_router_vtable {
  /* th_vtable_head, repeated flat. */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* Picks where request goes. The host rejects out-of-range indices. THREADING: instance's thread. */
  th_status (*route)(th_instance *instance, const th_route_request *request,
                     th_route_decision *decision, th_error *err);

  /* OPTIONAL (may be NULL). Told the outcome of a routed request, before its answer is delivered.
   * THREADING: the instance's thread. */
  void (*feedback)(th_instance *instance, const th_route_feedback *feedback);
} th_router_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_ROUTER_H */
