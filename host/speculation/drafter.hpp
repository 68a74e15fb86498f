// The drafter: a detached actor of each engine that makes every call into the engine's spec_decode
// plugin (propose, accepted, seq_end), so that a proposer's compute (a draft model's forward passes
// through draft sessions) runs on a thread of its own, never on CAF's scheduler threads. The engine
// keeps the plugin instance (its slot) and sends it with each call; the calls reach the drafter in the
// order the engine sends them, so the instance is called from one thread at a time.
#pragma once

#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "base/step.hpp"
#include "plugin/instance.hpp"
#include "speculation/drafts.hpp"

namespace tokenhost {

struct SequenceContext;

// One proposal: the step as the engine built it and the items that may take a draft. The candidates'
// token lists belong to `contexts`, which the engine leaves unchanged until the reply.
struct DraftJob {
  std::shared_ptr<PluginInstance> spec;
  DraftBounds bounds;
  StepBatch batch;
  std::vector<DraftCandidate> candidates;
  std::vector<std::shared_ptr<const SequenceContext>> contexts;
};
// The step with the drafts added (add_drafts), the proposer's failures so far and the time it took.
struct DraftReply {
  StepBatch batch;
  uint64_t propose_failures = 0;
  double seconds = 0;
  // The proposer threw from propose() (PluginFault's message; "" when it did not): the sequences it
  // was asked to draft for, whose requests end with that error.
  std::string fault;
  std::vector<uint64_t> fault_seqs;
};
// A call that tells the proposer how a sequence went: accepted (drafted, accepted) or seq_end.
struct DraftNotice {
  std::shared_ptr<PluginInstance> spec;
  uint64_t seq_id = 0;
  uint32_t drafted = 0, accepted = 0;
};

using propose_atom = caf::atom_constant<caf::atom("propose")>;
using accepted_atom = caf::atom_constant<caf::atom("accepted")>;
using seq_end_atom = caf::atom_constant<caf::atom("seqend")>;

using drafter_actor = caf::typed_actor<caf::replies_to<propose_atom, DraftJob>::with<DraftReply>,
                                       caf::reacts_to<accepted_atom, DraftNotice>,  // th_spec_decode_vtable.accepted
                                       caf::reacts_to<seq_end_atom, DraftNotice>>;  // th_spec_decode_vtable.seq_end

// Spawns a drafter detached (its own thread). It lives until it is sent an exit.
drafter_actor spawn_drafter(caf::actor_system& sys);

}  // namespace tokenhost

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::DraftJob)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::DraftReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::DraftNotice)
