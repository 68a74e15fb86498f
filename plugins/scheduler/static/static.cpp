// scheduler.static: the fixed-batch baseline.
//
// When no sequence runs, it admits a batch: up to batch_size waiting or preempted sequences in
// arrival order whose whole prompt_len + remaining max_new_tokens fit the free blocks together (the
// blocks are reserved up front, so the batch never has to preempt), stopping at the first that does
// not fit. The batch then runs (prefill in chunks within the step budget, then decode) until every
// sequence of it has finished; nothing is admitted meanwhile. A first sequence that does not fit even
// alone is admitted alone; one that cannot produce its next token even with the whole pool is not
// admitted at all, and the engine, seeing nothing run with nothing running, fails it (its oldest).
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_sched.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

struct Config {
  uint32_t batch_size;
  uint32_t max_chunk;
};

Config read_config(const th_config* config) {
  const sdk::Config c(config);
  return Config{uint32_t(c.require_int("batch_size")),
                uint32_t(c.require_int("max_prefill_chunk"))};
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "scheduler.static: check() got NULL");
    read_config(query->config);  // any model, any device
  });
}

// The batch (the running sequences), decodes first, then prefill chunks, each in arrival order. A
// chunk shrinks to the blocks free. Short of blocks (only a sequence admitted alone that outgrows the
// pool, or blocks the engine does not show), the latest arrived running sequence is preempted; when
// that is the sequence itself and it runs alone, nothing runs and the engine fails it.
void run_batch(sdk::SchedStep& step, const Config& config) {
  for (int decodes = 1; decodes >= 0; --decodes) {
    for (uint32_t i = 0; i < step.size(); ++i) {
      if (!step.undecided_running(i) || sdk::is_decoding(step.seq(i)) != bool(decodes)) continue;
      if (!step.has_budget()) return;
      const uint32_t n = step.step_tokens(i, config.max_chunk);
      if (step.fit_tokens(i, n) == 0 && !step.make_room_by_latest(i, 1)) continue;
      step.run(i, step.fit_tokens(i, n));
    }
  }
}

// With nothing running: picks the batch, then gives every member a first prefill chunk, keeping one
// token of the budget for each member after it.
void admit_batch(sdk::SchedStep& step, const Config& config) {
  const uint32_t limit = std::min({config.batch_size, step.seqs_left(), step.tokens_left()});
  std::vector<uint32_t> batch;
  uint64_t reserved = 0;
  for (uint32_t i = 0; i < step.size() && batch.size() < limit; ++i) {
    const th_sched_seq& s = step.seq(i);
    if (!sdk::is_waiting_or_preempted(s)) continue;
    if (sdk::never_fits(step.state(), s)) break;
    const uint64_t blocks = sdk::kv_blocks_for(sdk::final_positions(s), step.state().block_size);
    if (reserved + blocks > step.free_blocks()) {
      if (batch.empty()) batch.push_back(i);  // never fits its reservation: runs alone
      break;
    }
    batch.push_back(i);
    reserved += blocks;
  }
  for (size_t k = 0; k < batch.size(); ++k) {
    const uint32_t after = uint32_t(batch.size() - 1 - k);
    const uint32_t n = step.fit_tokens(batch[k], step.step_tokens(batch[k], config.max_chunk, step.tokens_left() - after));
    if (n == 0) return;
    step.run(batch[k], n);
  }
}

struct Static {
  explicit Static(const th_create_args& args) : config(read_config(args.config)) {}
  Config config;
};

th_status schedule(th_instance* instance, const th_sched_state* state, th_sched_decision* decision,
                   th_error* err) {
  return sdk::guard(err, [&] {
    sdk::check_schedule_args("scheduler.static", state, decision);
    const Config& config = sdk::self<Static>(instance).config;
    sdk::SchedStep step(*state, *decision);
    if (step.any_running()) {
      run_batch(step, config);
    } else {
      admit_batch(step, config);
    }
    step.grant_drafts();  // speculative decoding's draft tokens, from the budget left
    step.order_decodes_first();
  });
}

const th_scheduler_vtable kVtable = {
    sizeof(th_scheduler_vtable), sdk::create_instance<Static>, sdk::destroy_instance<Static>, check, schedule,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SCHEDULER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
