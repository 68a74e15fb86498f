#include "speculation/drafter.hpp"

#include <chrono>

namespace tokenhost {
namespace {

struct DrafterState {
  uint64_t propose_failures = 0;
  static inline const char* name = "tokenhost.drafter";
};

drafter_actor::behavior_type drafter(drafter_actor::stateful_pointer<DrafterState> self) {
  return {
      [=](propose_atom, DraftJob& job) -> DraftReply {
        DraftReply r;
        const auto started = std::chrono::steady_clock::now();
        // A draft model's forward passes compute on the engine's partition, as its steps do.
        const UseComputePool partition(job.spec->ctx()->pool.get());
        try {
          add_drafts(*job.spec, job.bounds, job.candidates, job.batch, self->state.propose_failures);
        } catch (const PluginFault& e) {  // logged where it was caught; the batch is as it came
          r.fault = e.what();
          for (const auto& c : job.candidates) r.fault_seqs.push_back(job.batch.items[c.item].seq_id);
        }
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        r.batch = std::move(job.batch);
        r.propose_failures = self->state.propose_failures;
        return r;
      },
      // Notices concern sequences whose tokens are already decided: a fault in them is logged (where it
      // was caught) and changes nothing else.
      [=](accepted_atom, const DraftNotice& n) {
        if (n.spec && n.spec->fn(&th_spec_decode_vtable::accepted)) try {
            n.spec->call(&th_spec_decode_vtable::accepted, "accepted", n.spec->handle(), n.seq_id, n.drafted, n.accepted);
          } catch (const PluginFault&) {
          }
      },
      [=](seq_end_atom, const DraftNotice& n) {
        if (n.spec && n.spec->fn(&th_spec_decode_vtable::seq_end)) try {
            n.spec->call(&th_spec_decode_vtable::seq_end, "seq_end", n.spec->handle(), n.seq_id);
          } catch (const PluginFault&) {
          }
      },
  };
}

}  // namespace

drafter_actor spawn_drafter(caf::actor_system& sys) { return sys.spawn<caf::detached>(drafter); }

}  // namespace tokenhost
