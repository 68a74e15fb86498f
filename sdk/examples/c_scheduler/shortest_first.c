/* Example plugin in plain C99, with nothing but the ABI headers: a scheduler that runs the decoding
 * sequences first (one token each), then prefills the sequences with the fewest prompt tokens left
 * (at most max_prefill_chunk each), within the step's token and sequence budgets and the free KV
 * blocks. It never preempts: a sequence that does not fit waits. Speculative decoding's draft tokens
 * (ABI 1.4) get what the budget has left once every sequence is placed. */
#include <stdlib.h>

#include <tokenhost/tokenhost.h>

static const th_host_api *host;

struct th_instance {
  uint32_t max_prefill_chunk;
  uint32_t *order;  /* scratch: indices into the state's sequences */
  uint32_t *placed; /* scratch: the state index of each run entry */
  uint32_t capacity;
};

static th_status create(const th_create_args *args, th_instance **out, th_error *err) {
  int64_t chunk = 64;
  th_instance *self;
  /* The host has merged plugin.toml's default and checked its range: absent only on a host that
   * does not (this example's own default applies then). */
  if (host->config_get_int(args->config, "max_prefill_chunk", &chunk) == TH_ERR_INVALID_ARGUMENT) {
    host->error_set(err, "scheduler.example_c: max_prefill_chunk must be an integer");
    return TH_ERR_INVALID_ARGUMENT;
  }
  self = (th_instance *)calloc(1, sizeof *self);
  if (self == NULL) return TH_ERR_OUT_OF_MEMORY;
  self->max_prefill_chunk = chunk > 0 ? (uint32_t)chunk : 1;
  *out = self;
  return TH_OK;
}

static void destroy(th_instance *self) {
  free(self->order);
  free(self->placed);
  free(self);
}

static th_status check(const th_check_query *query, th_error *err) {
  (void)query;
  (void)err;
  return TH_OK; /* a scheduler computes nothing on the device: it serves any model */
}

/* Prompt tokens a sequence has left to prefill; 0 when it decodes (th_scheduler.h: waiting and
 * preempted sequences have prefilled == 0). */
static uint32_t remaining(const th_sched_seq *s) { return s->prefilled >= s->prompt_len ? 0 : s->prompt_len - s->prefilled; }

static th_status schedule(th_instance *self, const th_sched_state *state, th_sched_decision *decision, th_error *err) {
  uint32_t i, j, n = state->n_seqs, budget = state->max_step_tokens, free_blocks = state->free_kv_blocks;
  const uint32_t bs = state->block_size > 0 ? state->block_size : 1;
  decision->n_run = 0;
  decision->n_preempt = 0;
  if (n > self->capacity) {
    uint32_t *grown = (uint32_t *)realloc(self->order, n * sizeof *grown);
    uint32_t *placed = grown != NULL ? (uint32_t *)realloc(self->placed, n * sizeof *placed) : NULL;
    if (grown != NULL) self->order = grown;
    if (placed == NULL) {
      host->error_set(err, "scheduler.example_c: out of memory");
      return TH_ERR_OUT_OF_MEMORY;
    }
    self->placed = placed;
    self->capacity = n;
  }
  /* Insertion sort by prompt tokens left (decodes have 0), then arrival: stable and small. */
  for (i = 0; i < n; ++i) {
    uint32_t at = i;
    while (at > 0 && remaining(&state->seqs[self->order[at - 1]]) > remaining(&state->seqs[i])) {
      self->order[at] = self->order[at - 1];
      --at;
    }
    self->order[at] = i;
  }
  for (j = 0; j < n && decision->n_run < state->max_step_seqs && budget > 0; ++j) {
    const th_sched_seq *s = &state->seqs[self->order[j]];
    const uint32_t left = remaining(s);
    uint32_t tokens = left == 0 ? 1 : left, need;
#if TH_ABI_VERSION_MINOR >= 9
    if (s->state == TH_SEQ_LOADING) continue; /* its blocks are still arriving: not runnable yet */
#endif
    if (tokens > self->max_prefill_chunk) tokens = self->max_prefill_chunk;
    if (tokens > budget) tokens = budget;
    need = (s->prefilled + tokens + bs - 1) / bs; /* th_scheduler.h: the blocks of [0, prefilled + n) */
    need = need > s->kv_blocks ? need - s->kv_blocks : 0;
    if (need > free_blocks) continue; /* waits for blocks; a shorter one may still fit */
    free_blocks -= need;
    budget -= tokens;
    decision->run[decision->n_run].seq_id = s->seq_id;
    decision->run[decision->n_run].n_tokens = tokens;
    self->placed[decision->n_run] = self->order[j];
    ++decision->n_run;
  }
  /* Draft tokens (ABI 1.4): a decoding sequence may take up to its seq_draft more, from what the budget
   * has left. Only where both structs have the members: an older host fills neither, and grants itself.
   * Built against older headers (-DTOKENHOST_ABI=1.2) the members do not exist: compiled out. */
#if TH_ABI_VERSION_MINOR >= 4
  if (TH_HAS_MEMBER(state, th_sched_state, seq_draft) && state->seq_draft != NULL &&
      TH_HAS_MEMBER(decision, th_sched_decision, run_draft) && decision->run_draft != NULL) {
    for (j = 0; j < decision->n_run; ++j) {
      const uint32_t offered = remaining(&state->seqs[self->placed[j]]) == 0 ? state->seq_draft[self->placed[j]] : 0;
      decision->run_draft[j] = offered < budget ? offered : budget;
      budget -= decision->run_draft[j];
    }
  }
#endif
  return TH_OK;
}

static const th_scheduler_vtable vtable = {sizeof(th_scheduler_vtable), create, destroy, check, schedule};

static const th_plugin_descriptor descriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SCHEDULER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &vtable,
};

TH_PLUGIN_EXPORT const th_plugin_descriptor *tokenhost_plugin_entry(const th_host_api *h) {
  host = h;
  return &descriptor;
}
