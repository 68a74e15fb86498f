// One step of an engine as every backend computes it: which sequences, which of their tokens at which
// positions, which rows return logits and how to sample each one's next token (the engine builds it,
// its worker runs it through its backend). The plugins it runs through: plugin/step_plugins.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tokenhost {

// How a sequence samples (runtime/sampling.hpp): what its worker samples with; backends never read it.
struct SequenceContext;

// A proposer's distribution for one draft token: (token, probability) pairs, the tokens not listed at
// probability 0 (th_spec_propose_args.dist_*).
using DraftDistribution = std::vector<std::pair<int32_t, float>>;

// One sequence's share of a step: feed `tokens` at positions [start, start + tokens.size()); when
// `sample`, return the next token after the last one.
struct StepItem {
  uint64_t seq_id = 0;
  uint32_t start = 0;
  std::vector<int32_t> tokens;
  bool sample = false;
  std::shared_ptr<SequenceContext> context;  // how to sample; NULL: greedy
  // The rows whose logits the step returns: the last logit_rows of tokens (every draft position of a
  // speculative step, say). 0: the last row when `sample`, none otherwise.
  uint32_t logit_rows = 0;
  // The last n_draft tokens are a proposer's draft, not yet the sequence's: the worker verifies them
  // (logit_rows = n_draft + 1) and keeps the longest run the target's own sampling agrees with.
  uint32_t n_draft = 0;
  // Beside a draft: the distribution each draft token was drawn from when the proposer gave it (its
  // token then verified by speculative sampling, Sampler::verify_draft), else empty (exact match).
  // Empty, or n_draft entries.
  std::vector<DraftDistribution> draft_dist{};
  // A tree of draft tokens: draft token j follows draft token draft_parent[j] (< j), or, at -1, the
  // item's own tokens. Empty: a chain (each follows the one before). A tree's tokens sit in the KV cache
  // at consecutive positions in draft order, each rotated by its depth (its place in the text); the
  // worker moves the accepted path's to the first positions after the step. Trees are verified by
  // exact match (draft_dist empty).
  std::vector<int32_t> draft_parent{};
  // Prefix caching: the item is its sequence's first chunk (start 0), the sequence found nothing cached
  // when it arrived, and blocks were published since: the worker looks the chunk's tokens up again
  // under cache_salt before the step and computes only what is not cached (StepResult::reused).
  bool relookup = false;
  uint64_t cache_salt = 0;
  // Prompt scoring (a request's prompt log-probabilities, OpenAI's echo with logprobs): every row of
  // the item returns logits (logit_rows = tokens.size(); never with a draft) and the worker reports,
  // for each row but a sampled last one, the log-probability of the token after it (the item's next
  // token, or score_next after its last row) with the context's top_logprobs most likely
  // (StepResult::scores).
  bool score = false;
  int32_t score_next = -1;
  uint32_t marked_rows() const { return logit_rows > 0 ? logit_rows : sample ? 1u : 0u; }
  // Keeps the first `keep` tokens of the draft (none: the item decodes one token); a tree stays one
  // (every parent comes before its child).
  void cut_draft(uint32_t keep) {
    if (keep >= n_draft) return;
    tokens.resize(tokens.size() - (n_draft - keep));
    if (!draft_dist.empty()) draft_dist.resize(keep);
    if (!draft_parent.empty()) draft_parent.resize(keep);
    n_draft = keep;
    logit_rows = keep > 0 ? keep + 1 : 0;
    if (keep == 0) draft_dist.clear();
  }
  // The draft's leading chain: how many of its first tokens each follow the one before.
  uint32_t chain_length() const {
    uint32_t n = 0;
    while (n < n_draft && (draft_parent.empty() || draft_parent[n] == int32_t(n) - 1)) ++n;
    return n;
  }
  bool is_tree() const { return chain_length() < n_draft; }
};

struct StepBatch {
  std::vector<StepItem> items;
  // When set, the backend writes here every row's final hidden state after the output norm, [rows][dim]
  // in item then row order: what an embedding pools (runtime/generator.hpp, Generator::embed). NULL:
  // only the marked rows' logits are computed.
  std::vector<float>* hidden = nullptr;
};

}  // namespace tokenhost
