// What a router may know of a request besides its prompt (th_route_request, ABI 1.7): the key of the
// parameters that shape its answer, whether the answer is deterministic, and who pays for it. One
// place computes them, so a response cache's key and a budget's payer mean the same everywhere.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/sampling.hpp"

namespace tokenhost::routing {

// Everything besides the prompt and the privacy namespace that shapes the answer's tokens.
struct AnswerParams {
  std::string model;  // the public model asked for (a group's name, or a model's)
  SamplingParams sampling;
  bool seeded = false;  // the client fixed the seed (else sampling.seed was drawn for this request)
  uint32_t max_tokens = 0;
  bool ignore_eos = false;
  bool logprobs = false;
  uint32_t max_draft = 0;
};

// th_route_request.params_key: equal for requests whose answers are the same function of the prompt.
// The seed counts only when it is used (temperature above 0).
uint64_t params_key(const AnswerParams& p);
// th_route_request.deterministic: greedy or a client-fixed seed, and no log-probabilities asked for.
bool deterministic(const AnswerParams& p);
// th_route_request.payer: "key-" and 16 hex digits of a hash of the API key; "" without one.
std::string payer_id(const std::string& api_key);

}  // namespace tokenhost::routing
