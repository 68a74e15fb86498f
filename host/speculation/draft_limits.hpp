// Speculative decoding's bounds on a draft, shared by the request parser (a request's max_draft) and
// the engine (what it asks of its spec_decode plugin).
#pragma once

#include <cstdint>

namespace tokenhost {

// The most draft tokens one sequence carries in one step, whoever asks: a request's max_draft is
// refused above it.
constexpr uint32_t kMaxDraftTokens = 16;

// The draft length an engine asks its proposer for when neither the request nor the engine's setting
// says otherwise.
constexpr uint32_t kDefaultMaxDraft = 4;

}  // namespace tokenhost
