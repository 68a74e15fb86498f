// tokenhost plugin SDK: header-only C++ helpers for speculative decoding proposers (C++17).
//
// Like plugin.hpp it adds no ABI: it only reads the C structs of th_spec_decode.h. What it gives:
//   - sdk::check_propose_args(): the NULL checks every propose() starts with (the arrays, each
//     sequence's tokens, each draft's buffers when max_draft > 0);
//   - sdk::seq_max_draft(): the draft bound of one sequence (ABI 1.4's seq_max_draft, max_draft from
//     an older host);
//   - sdk::write_draft_distribution(): writes the distribution a draft token was drawn from, opting it
//     into speculative sampling (ABI 1.4), when the host offers room for it.
#ifndef TOKENHOST_PLUGIN_SPEC_HPP
#define TOKENHOST_PLUGIN_SPEC_HPP

#include <tokenhost/plugin.hpp>

#include <string>

namespace tokenhost::sdk {

// Throws Error(TH_ERR_INVALID_ARGUMENT) naming plugin_id (and the sequence) for a NULL where propose()
// needs memory.
inline void check_propose_args(const char* plugin_id, const th_spec_propose_args* args) {
  if (args == nullptr || (args->n_seqs > 0 && (args->seqs == nullptr || args->drafts == nullptr)))
    throw Error(TH_ERR_INVALID_ARGUMENT, std::string(plugin_id) + ": propose() got a NULL argument");
  for (uint32_t s = 0; s < args->n_seqs; ++s) {
    const th_spec_seq& seq = args->seqs[s];
    const th_spec_draft& draft = args->drafts[s];
    if ((seq.n_tokens > 0 && seq.tokens == nullptr) ||
        (args->max_draft > 0 && (draft.tokens == nullptr || draft.parents == nullptr)))
      throw Error(TH_ERR_INVALID_ARGUMENT,
                  std::string(plugin_id) + ": sequence " + std::to_string(seq.seq_id) + " has a NULL buffer");
  }
}

// The most draft tokens the host verifies for sequence k of args: its seq_max_draft entry from a 1.4
// host, else max_draft.
inline uint32_t seq_max_draft(const th_spec_propose_args* args, uint32_t k) {
  if (TH_HAS_MEMBER(args, th_spec_propose_args, seq_max_draft) && args->seq_max_draft != nullptr)
    return args->seq_max_draft[k] < args->max_draft ? args->seq_max_draft[k] : args->max_draft;
  return args->max_draft;
}

// Writes the distribution draft token j of sequence k was drawn from (n pairs of token and
// probability; th_spec_propose_args.dist_capacity says what the host then does with it). Returns false,
// writing nothing, when the host offers no room (an older host, or n above dist_capacity): the draft
// is then verified by exact match.
inline bool write_draft_distribution(const th_spec_propose_args* args, uint32_t k, uint32_t j, const int32_t* tokens,
                                     const float* probs, uint32_t n) {
  if (!TH_HAS_MEMBER(args, th_spec_propose_args, dist_len) || args->dist_len == nullptr || args->dist_tokens == nullptr ||
      args->dist_probs == nullptr || n > args->dist_capacity || j >= args->max_draft)
    return false;
  const size_t e = size_t(k) * args->max_draft + j;
  for (uint32_t i = 0; i < n; ++i) {
    args->dist_tokens[e * args->dist_capacity + i] = tokens[i];
    args->dist_probs[e * args->dist_capacity + i] = probs[i];
  }
  args->dist_len[e] = n;
  return true;
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_SPEC_HPP
