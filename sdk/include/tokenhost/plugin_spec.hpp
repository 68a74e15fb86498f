// tokenhost plugin SDK: header-only C++ helpers for speculative decoding proposers (C++17).
//
// Like plugin.hpp it adds no ABI: it only reads the C structs of th_spec_decode.h. What it gives:
//   - sdk::check_propose_args(): the NULL checks every propose() starts with (the arrays, each
//     sequence's tokens, each draft's buffers when max_draft > 0).
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

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_SPEC_HPP
