// How many tokens a request generates when it does not say, and the most one may ask for: each fact
// once, read by the manifest reader ([limits] default_max_tokens), the gateway's routes
// (host/request/), the in-process request (actors/request.hpp) and the CLI; the README states the
// same values (tests/host/base/test_request_defaults.cpp compares them).
#pragma once

#include <cstdint>

namespace tokenhost {

// An OpenAI request without max_tokens: [limits] default_max_tokens when the manifest leaves it unset.
inline constexpr uint32_t kDefaultMaxTokens = 512;
// POST /v1/generate without max_tokens, and an in-process GenerateRequest's own default.
inline constexpr uint32_t kGenerateRouteMaxTokens = 16;
// `tokenhost generate` without --max-tokens.
inline constexpr uint32_t kCliMaxTokens = 128;
// The most tokens any request, or default_max_tokens, may ask for.
inline constexpr uint32_t kMaxTokensLimit = 1u << 20;

}  // namespace tokenhost
