/*
 * tokenhost plugin ABI: structured output (TH_KIND_CONSTRAINT, ABI 1.11).
 *
 * A constraint engine says, for each sequence whose request constrains its output (a JSON Schema, any
 * JSON object, a grammar), which tokens may come next given what was generated. The host applies the
 * answer before sampling: disallowed tokens get no probability, for every row of a step, the rows of a
 * speculative draft included (each draft row's state is the parent row's advanced by the draft token,
 * dropped with the draft when the target rejects it), so speculation stays lossless under a constraint.
 *
 * The host compiles a request's constraint once per distinct source and engine instance and keeps the
 * compiled program while it is in use or among the most recently used; each sequence then holds a state
 * of that program. The host decides the end of a sequence: it allows the model's end-of-generation
 * tokens exactly where the plugin reports the text so far complete, and never offers control tokens
 * (th_vocab.attrs) to the plugin's masks.
 *
 * THREADING: one instance is called from its engine's worker only, one call at a time (th_common.h);
 * programs and states belong to the instance that made them and are passed back to it alone.
 */
#ifndef TOKENHOST_TH_CONSTRAINT_H
#define TOKENHOST_TH_CONSTRAINT_H

#include "th_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled constraint and one sequence's position in it: defined by the plugin. */
typedef struct th_constraint_program th_constraint_program;
typedef struct th_constraint_state th_constraint_state;

/* What a request constrains its output to. Host 1.11 sends these types:
 *   "json_schema"  text: the schema, a JSON object in the subset the host accepts (README, "Structured
 *                  output"), already checked by the host;
 *   "json_object"  text: "" (any JSON object);
 *   "gbnf"         text: a grammar in llama.cpp's GBNF, already parsed by the host.
 * Whatever the type, gbnf holds the host's translation of the same language into GBNF (start rule
 * `root`, the grammar of sdk/include/tokenhost/gbnf.hpp), so an engine that reads GBNF alone serves
 * every type. OWNERSHIP: host, valid during the call: copy what you keep. */
typedef struct th_constraint_source {
  uint32_t struct_size;
  const char *type;
  const char *text;
  const char *gbnf;
} th_constraint_source;

/* One call's masks: for each state, a bit per vocabulary token (bit t % 32 of word t / 32), set when
 * the token may come next. The host zeroes masks before the call; bits of control tokens and past
 * the vocabulary are ignored. complete[i] = 1 when the text of state i is a whole sentence of the
 * constraint (the sequence may end there; it may also go on), else 0.
 * OWNERSHIP: host buffers, valid during the call. */
typedef struct th_constraint_mask_args {
  uint32_t struct_size;
  th_constraint_state *const *states; /* [n_states] */
  uint32_t n_states;
  uint32_t words_per_mask;            /* (th_vocab.n_tokens + 31) / 32 */
  uint32_t *masks;                    /* [n_states][words_per_mask], out */
  uint8_t *complete;                  /* [n_states], out */
} th_constraint_mask_args;

typedef struct th_constraint_vtable {
  /* th_vtable_head, repeated flat. create() receives the engine's vocabulary in th_create_args.vocab
   * (host 1.11 always sets it for this kind). */
  uint32_t struct_size;
  th_status (*create)(const th_create_args *args, th_instance **out, th_error *err);
  void (*destroy)(th_instance *instance);
  th_status (*check)(const th_check_query *query, th_error *err);

  /* REQUIRED. Compiles source into *out (the plugin's until release()). TH_ERR_UNSUPPORTED for a type
   * it does not take (it should take every type through source->gbnf), TH_ERR_INVALID_ARGUMENT naming
   * what is wrong in the source. Called when a sequence with a constraint not compiled yet (or
   * released since) first samples. */
  th_status (*compile)(th_instance *instance, const th_constraint_source *source, th_constraint_program **out,
                       th_error *err);
  /* REQUIRED. Frees a program. Called after every state made from it was freed. */
  void (*release)(th_instance *instance, th_constraint_program *program);
  /* REQUIRED. A state at the start of program (nothing generated yet) into *out. */
  th_status (*start)(th_instance *instance, th_constraint_program *program, th_constraint_state **out, th_error *err);
  /* REQUIRED. An independent copy of state into *out: advancing one never changes the other (a draft
   * row's state is a clone of its parent row's). */
  th_status (*clone)(th_instance *instance, const th_constraint_state *state, th_constraint_state **out, th_error *err);
  /* REQUIRED. Frees a state. */
  void (*free_state)(th_instance *instance, th_constraint_state *state);
  /* REQUIRED. Moves state past token. A token its mask does not allow returns TH_ERR_INVALID_ARGUMENT
   * and leaves state as it was (the host then drops that draft row); a token its mask allows must
   * return TH_OK. Never called with a control token. */
  th_status (*advance)(th_instance *instance, th_constraint_state *state, int32_t token, th_error *err);
  /* REQUIRED. Writes every state's mask and completeness (th_constraint_mask_args): called once per
   * step with the rows of every constrained sequence of the step. A mask with no token set on a state
   * that is not complete ends that sequence with an error naming the constraint. */
  th_status (*masks)(th_instance *instance, const th_constraint_mask_args *args, th_error *err);
} th_constraint_vtable;

#ifdef __cplusplus
}
#endif

#endif /* TOKENHOST_TH_CONSTRAINT_H */
