// scheduler.fifo: first come, first served continuous batching with chunked prefill.
//
// Each step: running sequences first, in arrival order (a prefill chunk or one decode token each),
// preempting the most recently arrived running sequence when KV blocks run short; then waiting and
// preempted sequences, in arrival order, while the budgets and free blocks allow, with no overtaking.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_sched.hpp>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

uint32_t read_chunk(const th_config* config) {
  return uint32_t(sdk::Config(config).require_int("max_prefill_chunk"));
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "scheduler.fifo: check() got NULL");
    read_chunk(query->config);  // any model, any device
  });
}

// Running sequences first, in arrival order (a prefill chunk or one decode token each), preempting the
// latest arrived undecided running sequence until each fits.
void run_running(sdk::SchedStep& step, uint32_t max_chunk) {
  for (uint32_t i = 0; i < step.size(); ++i) {
    if (!step.undecided_running(i)) continue;
    if (!step.has_budget()) return;
    const uint32_t n = step.step_tokens(i, max_chunk);
    if (step.make_room_by_latest(i, n)) step.run(i, n);
  }
}

// No admission in a step that had to preempt: the preempted sequences arrived earlier and get the
// blocks back first (no overtaking).
void admit_waiting(sdk::SchedStep& step, uint32_t max_chunk) {
  if (step.n_preempt() > 0) return;
  for (uint32_t i = 0; i < step.size(); ++i) {
    if (!sdk::is_waiting_or_preempted(step.seq(i))) continue;
    if (!step.has_budget()) return;
    const uint32_t n = step.step_tokens(i, max_chunk);
    if (step.blocks_needed(i, n) > step.free_blocks()) return;
    step.run(i, n);
  }
}

struct Fifo {
  explicit Fifo(const th_create_args& args) : max_chunk(read_chunk(args.config)) {}
  uint32_t max_chunk;
};

th_status schedule(th_instance* instance, const th_sched_state* state, th_sched_decision* decision,
                   th_error* err) {
  return sdk::guard(err, [&] {
    sdk::check_schedule_args("scheduler.fifo", state, decision);
    const uint32_t max_chunk = sdk::self<Fifo>(instance).max_chunk;
    sdk::SchedStep step(*state, *decision);
    run_running(step, max_chunk);
    admit_waiting(step, max_chunk);
    step.grant_drafts();  // speculative decoding's draft tokens, from the budget left
  });
}

const th_scheduler_vtable kVtable = {
    sizeof(th_scheduler_vtable), sdk::create_instance<Fifo>, sdk::destroy_instance<Fifo>, check, schedule,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SCHEDULER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
