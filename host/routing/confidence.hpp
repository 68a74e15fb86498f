// The confidence signal of a generation (th_route_signal): what a cascade's router reads at each
// checkpoint to decide whether a cheaper model's answer is good enough. The host computes it from the
// model's own distribution at each sampled token, so any router can use it without a second model.
#pragma once

#include <cstdint>
#include <string>

#include <tokenhost/th_router.h>

#include "runtime/sampling.hpp"

namespace tokenhost::routing {

class ConfidenceSignal {
 public:
  // One more token: its log-probability and the entropy of the distribution it came from.
  void add(const SampledToken& token);
  uint32_t n_tokens() const { return n_; }
  // The signal so far, with `stop` (TH_STOP_*) as its state.
  th_route_signal signal(int32_t stop) const;

 private:
  uint32_t n_ = 0;
  double sum_logprob_ = 0, min_logprob_ = 0, sum_entropy_ = 0, max_entropy_ = 0;
};

// TH_STOP_* of a GenerateResult's finish_reason ("stop", "length", "cancelled", "error"; anything
// else: still running).
int32_t stop_of(const std::string& finish_reason);

}  // namespace tokenhost::routing
