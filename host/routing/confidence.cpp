#include "routing/confidence.hpp"

#include <algorithm>

namespace tokenhost::routing {

void ConfidenceSignal::add(const SampledToken& token) {
  const double lp = token.logprob, h = token.entropy;
  min_logprob_ = n_ == 0 ? lp : std::min(min_logprob_, lp);
  max_entropy_ = n_ == 0 ? h : std::max(max_entropy_, h);
  sum_logprob_ += lp;
  sum_entropy_ += h;
  ++n_;
}

th_route_signal ConfidenceSignal::signal(int32_t stop) const {
  th_route_signal s{};
  s.struct_size = sizeof s;
  s.n_tokens = n_;
  if (n_ > 0) {
    s.mean_logprob = sum_logprob_ / n_;
    s.min_logprob = min_logprob_;
    s.mean_entropy = sum_entropy_ / n_;
    s.max_entropy = max_entropy_;
  }
  s.stop = stop;
  return s;
}

int32_t stop_of(const std::string& finish_reason) {
  if (finish_reason == "stop") return TH_STOP_EOS;
  if (finish_reason == "length") return TH_STOP_LENGTH;
  if (finish_reason == "cancelled") return TH_STOP_CANCELLED;
  if (finish_reason == "error") return TH_STOP_ERROR;
  return TH_STOP_NONE;
}

}  // namespace tokenhost::routing
