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
        add_drafts(*job.spec, job.bounds, job.candidates, job.batch, self->state.propose_failures);
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        r.batch = std::move(job.batch);
        r.propose_failures = self->state.propose_failures;
        return r;
      },
      [=](accepted_atom, const DraftNotice& n) {
        if (n.spec && n.spec->fn(&th_spec_decode_vtable::accepted))
          n.spec->call(&th_spec_decode_vtable::accepted, "accepted", n.spec->handle(), n.seq_id, n.drafted, n.accepted);
      },
      [=](seq_end_atom, const DraftNotice& n) {
        if (n.spec && n.spec->fn(&th_spec_decode_vtable::seq_end))
          n.spec->call(&th_spec_decode_vtable::seq_end, "seq_end", n.spec->handle(), n.seq_id);
      },
  };
}

}  // namespace

drafter_actor spawn_drafter(caf::actor_system& sys) { return sys.spawn<caf::detached>(drafter); }

}  // namespace tokenhost
