#include "routing/route_keys.hpp"

#include <cstdio>
#include <cstring>

namespace tokenhost::routing {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

struct Hasher {
  uint64_t h = kFnvOffset;
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  }
  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }
  void text(const std::string& s) {
    value(uint64_t(s.size()));
    bytes(s.data(), s.size());
  }
};

}  // namespace

uint64_t params_key(const AnswerParams& p) {
  Hasher h;
  h.text(p.model);
  const SamplingParams& s = p.sampling;
  h.value(s.temperature);
  h.value(s.top_k);
  h.value(s.top_p);
  h.value(s.min_p);
  h.value(s.repetition_penalty);
  h.value(s.frequency_penalty);
  h.value(s.presence_penalty);
  h.value(s.penalty_last_n);
  h.value(s.temperature > 0.0f ? s.seed : uint64_t(0));
  h.value(s.top_logprobs);
  h.value(uint64_t(s.logit_bias.size()));
  for (const auto& [token, bias] : s.logit_bias) {
    h.value(token);
    h.value(bias);
  }
  h.value(p.max_tokens);
  h.value(uint8_t(p.ignore_eos));
  h.value(uint8_t(p.logprobs));
  h.value(p.max_draft);
  return h.h;
}

bool deterministic(const AnswerParams& p) { return (p.sampling.temperature == 0.0f || p.seeded) && !p.logprobs; }

std::string payer_id(const std::string& api_key) {
  if (api_key.empty()) return "";
  Hasher h;
  h.text("tokenhost payer");
  h.text(api_key);
  char out[24];
  std::snprintf(out, sizeof out, "key-%016llx", static_cast<unsigned long long>(h.h));
  return out;
}

}  // namespace tokenhost::routing
