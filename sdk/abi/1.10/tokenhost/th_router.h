/*
 * tokenhost plugin ABI: router plugins (TH_KIND_ROUTER).
 *
 * The router actor asks its router plugin which engine serves a request, after guards (rate limits,
 * circuit breakers) and the experiment split have narrowed the candidates. A router may answer with one
 * target, a cascade (try cheap engines first, escalate when the answer is not good enough), an answer
 * it has cached, or an ensemble (several engines answer, one answer is kept).
 *
 * Model groups (ABI 1.7): a deployment may serve one public model name through several models, each
 * with a declared relative cost and quality ([groups.NAME] in the manifest). A request for the group
 * has a candidate for every engine of each member model, whose cost_per_mtok and quality are the
 * member's declared figures; th_route_request.model is the group's name, each candidate's model the
 * member's. The members of a group share one tokenizer (the host refuses a group that does not), so
 * the prompt's tokens mean the same on every candidate.
 */
#ifndef TOKENHOST_TH_ROUTER_H
#define TOKENHOST_TH_ROUTER_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ABI 1.9: an engine's role in prefill/decode disaggregation (th_route_request.candidate_roles). */
typedef int32_t th_engine_role;
#define TH_ROLE_BOTH 0    /* computes prompts and decodes (the default) */
#define TH_ROLE_PREFILL 1 /* meant for prompts: the first token, its KV connectors saving the blocks */
#define TH_ROLE_DECODE 2  /* meant to continue from blocks its KV connectors load */

/* OWNERSHIP of every pointer: host, valid during the call. */
typedef struct th_route_candidate {
  const char *engine_id;
  const char *model;
  uint32_t running;       /* sequences running now */
  uint32_t waiting;       /* sequences queued; host 1.6 sets 0 (running counts the requests in flight) */
  double load;            /* 0 = idle, 1 = saturated; host 1.6: requests in flight / 64, at most 1 */
  double cost_per_mtok;   /* relative cost of a million tokens: the group member's declared cost (host
                             1.7); 1.0 for a model outside any group */
  double quality;         /* relative quality score, higher is better: the group member's declared
                             quality (host 1.7); 1.0 for a model outside any group */
  int32_t healthy;        /* 0 when a guard marked it unhealthy */
} th_route_candidate;

typedef struct th_route_request {
  uint32_t struct_size;
  uint64_t request_id;
  const char *model;        /* model the client asked for */
  const char *prompt;       /* prompt text (prompt_len bytes); "" when only tokens are known (token
                               prompts, in-process callers; host 1.6 always passes "") */
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
  /* ABI 1.7 (read them only when TH_HAS_MEMBER says they are there). */
  uint32_t max_tokens;        /* the most tokens the answer may have */
  /* The request's privacy namespace: a hash of its API key and cache_salt (never 0). An answer kept for
   * one namespace must never be given to another (a response cache would show one client another's
   * prompt). */
  uint64_t cache_namespace;
  /* A hash of everything besides the prompt and the namespace that shapes the answer's tokens
   * (sampling parameters and seed, max_tokens, ignore_eos, logit_bias): equal keys with equal prompts
   * and deterministic set give equal tokens. */
  uint64_t params_key;
  /* 1 when the answer is a function of (prompt, params_key): greedy (temperature 0) or a seed the client
   * fixed, and no log-probabilities asked for (a cached answer carries none). 0 otherwise: a router
   * must not answer such a request from a cache. */
  int32_t deterministic;
  const char *request_class; /* the request's class (its "tokenhost": {"class"}), "" when none */
  /* Who pays: "key-" and 16 hex digits of a hash of the request's API key (the same key always gives
   * the same id; `tokenhost key-id KEY` prints it, so a budget can be configured without writing the
   * key into a plugin's config), or "" on a gateway without API keys. */
  const char *payer;
  /* ABI 1.8, parallel to candidates (read them only when TH_HAS_MEMBER says they are there): where each
   * candidate runs. candidate_nodes[i] is the name of the cluster node that runs candidates[i] ("" for
   * an engine of this process); candidate_rtt_s[i] is the round trip in seconds of this node's link to
   * that node as its last heartbeat measured it (0 for an engine of this process, -1 while no heartbeat
   * has come back). A remote engine's time to first token is at least one round trip more than a local
   * one's; host 1.8 always sets both. */
  const char *const *candidate_nodes;
  const double *candidate_rtt_s;
  /* ABI 1.9, parallel to candidates (read it only when TH_HAS_MEMBER says it is there): each engine's
   * declared role (its manifest's `role`), for prefill/decode disaggregation (TH_ROUTE_DISAGGREGATE).
   * A role is the operator's intent: the host serves any request on any engine the router picks. */
  const th_engine_role *candidate_roles;
} th_route_request;

typedef int32_t th_route_action;
#define TH_ROUTE_TARGET 0   /* serve on candidates[target] */
/* Try cascade[0], escalate to cascade[1], ...: from host 1.7, a router with escalate() is asked at
 * each stage's checkpoints whether to go on (below); one without it, and host 1.6, serve cascade[0]
 * alone. A stage's tokens reach the client once the stage is the one that answers (it ended and
 * escalate() kept it, or escalate() accepted it early, or it is the last stage): a streaming client's
 * first token waits for that. */
#define TH_ROUTE_CASCADE 1
/* Answer with cached_tokens (ABI 1.7), no engine runs: the host streams them like live ones, with
 * cached_stop as their end, and counts the answer as cached. Host 1.6 refuses the action. */
#define TH_ROUTE_CACHED 2
/* ABI 1.7. Ensemble: every candidate cascade[0..n_cascade) answers, n_samples times each (seeds
 * differ), then select() picks the answer the client gets (without select(): the highest mean
 * log-probability). Every answer's tokens are accounted as cost. */
#define TH_ROUTE_ENSEMBLE 3
/* ABI 1.9. Prefill/decode disaggregation: cascade[0] computes the prompt and the first token (its
 * request ends there, and its answer waits until its KV connectors have stored the prompt's blocks);
 * cascade[1] continues from the prompt and that token, finding the prompt's blocks through its own
 * connectors (a tier the two share), and computes what it does not find. n_cascade is 2, two different
 * engines of one model. The client sees one stream: the first token as cascade[0] gives it, then
 * cascade[1]'s. A request whose first token ends it (end of sequence, max_tokens 1) ends at cascade[0].
 * Greedy answers equal an engine's alone; a sampled one is a sample of the same distribution, its
 * random draws not the same as one engine's. Host 1.8 refuses the action. */
#define TH_ROUTE_DISAGGREGATE 4

typedef struct th_route_decision {
  uint32_t struct_size;
  th_route_action action;
  uint32_t target;          /* TH_ROUTE_TARGET: index into candidates */
  uint32_t *cascade;        /* OWNERSHIP: host array with room for n_candidates indices */
  uint32_t n_cascade;
  const char *cached_text;  /* Not read by the host: a cached answer is given as tokens (cached_tokens) */
  size_t cached_len;        /* Not read by the host */
  /* ABI 1.7: the host sets struct_size to its own size and these to 0 before route(); a router of an
   * earlier minor leaves them so. */
  /* TH_ROUTE_CASCADE: while a stage before the last generates, ask escalate() after every check_every
   * tokens; 0 asks only when the stage ends. */
  uint32_t check_every;
  /* TH_ROUTE_CACHED: the answer's tokens and how it ended (TH_STOP_EOS or TH_STOP_LENGTH). OWNERSHIP:
   * plugin, valid until the next call on the instance; the host copies them. At most the request's
   * max_tokens tokens, each inside the vocabulary, or the request fails naming the plugin. */
  const int32_t *cached_tokens;
  uint32_t n_cached_tokens;
  int32_t cached_stop;
  /* TH_ROUTE_ENSEMBLE: answers per listed candidate, 1..8 (0 reads as 1). */
  uint32_t n_samples;
} th_route_decision;

/* ABI 1.7. How a generation ended, or that it has not. */
#define TH_STOP_NONE 0       /* still generating */
#define TH_STOP_EOS 1        /* the model's end-of-sequence token */
#define TH_STOP_LENGTH 2     /* max_tokens */
#define TH_STOP_CANCELLED 3  /* cancelled (the client left, or the host stopped it) */
#define TH_STOP_ERROR 4      /* failed */

/* ABI 1.7. The confidence signal of a generation so far, which the host computes from the model's
 * distribution at each sampled token (penalties applied, at temperature 1). */
typedef struct th_route_signal {
  uint32_t struct_size;
  uint32_t n_tokens;     /* tokens generated so far */
  double mean_logprob;   /* mean natural log-probability of the tokens chosen (<= 0); 0 for none */
  double min_logprob;    /* the lowest of them; 0 for none */
  double mean_entropy;   /* mean entropy (nats) of the distributions they were drawn from; 0 for none */
  double max_entropy;    /* the highest of them; 0 for none */
  int32_t stop;          /* TH_STOP_*: TH_STOP_NONE while it runs */
} th_route_signal;

/* ABI 1.7. A cascade's stage at a checkpoint: escalate() decides whether the next stage takes over. */
typedef struct th_route_stage {
  uint32_t struct_size;
  uint64_t request_id;
  uint32_t stage;            /* 0 for the first */
  uint32_t n_stages;         /* the cascade's length; the last stage is never asked */
  uint32_t candidate;        /* this stage's index into the route's candidates */
  const char *engine_id;
  const char *model;
  double cost_per_mtok;      /* the candidate's, as route() saw it */
  double quality;
  const int32_t *tokens;     /* the tokens generated so far [signal->n_tokens] */
  const th_route_signal *signal;
} th_route_stage;

#define TH_STAGE_CONTINUE 0  /* go on here (at the stage's end: this stage answers) */
#define TH_STAGE_ESCALATE 1  /* this stage ends unanswered; the next one answers the prompt afresh */
#define TH_STAGE_ACCEPT 2    /* this stage answers: no more checkpoints, its tokens go to the client
                                from now on (a streaming client gets them as they come) */

/* ABI 1.7. The answers of an ensemble, for select(). */
typedef struct th_route_answer {
  uint32_t struct_size;
  uint32_t candidate;        /* index into the route's candidates */
  const char *engine_id;
  const char *model;
  const int32_t *tokens;     /* [n_tokens] */
  uint32_t n_tokens;
  const char *text;          /* their text (text_len bytes, not NUL-terminated) */
  size_t text_len;
  const th_route_signal *signal;  /* stop says how it ended; a failed answer has TH_STOP_ERROR */
} th_route_answer;

typedef struct th_route_ensemble {
  uint32_t struct_size;
  uint64_t request_id;
  const th_route_answer *answers;  /* [n_answers], in cascade order, samples of a candidate together */
  uint32_t n_answers;
} th_route_ensemble;

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
  /* ABI 1.7 (read them only when TH_HAS_MEMBER says they are there). */
  const int32_t *prompt_tokens;     /* the request's prompt [n_prompt_tokens] */
  uint32_t n_prompt_tokens;
  const int32_t *output_tokens;     /* the answer's tokens [tokens_out] */
  int32_t stop;                     /* TH_STOP_*: how the answer ended */
  uint64_t cache_namespace;         /* as in the request */
  uint64_t params_key;
  int32_t deterministic;
  int32_t cached;                   /* 1 when a router answered it from its cache */
  uint32_t stages;                  /* engines that generated for it: cascade stages run, ensemble
                                       answers; 0 for a cached answer */
  /* The cost the host accounts: the sum over those engines of cost_per_mtok x (prompt + generated
   * tokens) / 1e6; 0 for a cached answer. */
  double cost;
  const th_route_signal *signal;    /* of the answer that was kept; NULL for a cached one */
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

  /* ABI 1.7, OPTIONAL (may be NULL: a cascade then serves its first stage alone). At each checkpoint of
   * a cascade's stage before the last (every decision.check_every tokens, and once when the stage
   * ends), says whether to go on (TH_STAGE_CONTINUE), escalate (TH_STAGE_ESCALATE) or answer with this
   * stage (TH_STAGE_ACCEPT). Any other verdict, or a status other than TH_OK, fails the request.
   * THREADING: the instance's thread. */
  th_status (*escalate)(th_instance *instance, const th_route_stage *stage, int32_t *verdict, th_error *err);

  /* ABI 1.7, OPTIONAL (may be NULL: the highest mean log-probability wins). Picks the answer of an
   * ensemble the client gets: *chosen, an index into answers->answers; the host rejects one out of
   * range or naming a failed answer. THREADING: the instance's thread. */
  th_status (*select)(th_instance *instance, const th_route_ensemble *answers, uint32_t *chosen, th_error *err);
} th_router_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_ROUTER_H */
