// Speculative decoding's engine side: asking the spec_decode plugin for drafts and adding what can be
// verified to a step (the worker verifies them, Sampler::verify_draft and exact match).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plugin/instance.hpp"
#include "base/step.hpp"

namespace tokenhost {

// One item of a step that may take a draft: it decodes one token of a sequence that has generated
// before (the first token comes from the prompt's last row).
struct DraftCandidate {
  size_t item;                          // index into the step's items
  const std::vector<int32_t>* tokens;   // the sequence so far (prompt, then generated)
  uint32_t max_draft;                   // the most draft tokens it may take (> 0)
};

// The engine's bounds on every draft.
struct DraftBounds {
  std::string engine;        // for the log
  uint32_t vocab_size = 0;
  uint32_t context_len = 0;  // the cache positions a sequence may reach (a sliding window's cap)
  uint32_t max_step_tokens = 0;
};

// The largest distribution a proposer may give for one draft token (th_spec_propose_args.dist_capacity).
constexpr uint32_t kDraftDistCapacity = 64;

// Asks spec for a draft for each candidate (one propose() call) and appends what the step can verify:
// chains and trees cut at the first entry whose parent is not -1 or an earlier entry, or whose token is
// not in the vocabulary, within the candidate's max_draft, the step's token budget and the context (a
// tree's tokens take consecutive cache positions). A chain's draft token keeps its distribution only
// when it is one (finite probabilities in (0, 1] summing to at most 1, the token among them);
// otherwise, and in trees, tokens are verified by exact match. A failed propose() costs the step its drafts; it
// counts in propose_failures and is logged at the 1st, 10th, 100th, ... failure.
void add_drafts(PluginInstance& spec, const DraftBounds& bounds, const std::vector<DraftCandidate>& candidates,
                StepBatch& batch, uint64_t& propose_failures);

}  // namespace tokenhost
