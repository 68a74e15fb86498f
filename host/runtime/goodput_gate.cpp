#include "runtime/goodput_gate.hpp"

#include <bit>
#include <cmath>

namespace tokenhost {

void GoodputGate::observe(uint64_t now_ns, uint32_t tokens, uint32_t sequences) {
  if (sequences == 0) return;
  const uint64_t last = last_ns_;
  last_ns_ = now_ns;
  if (last == 0 || now_ns <= last) return;
  const double gap = double(now_ns - last) * 1e-9;
  if (gap > kMaxGapSeconds) {  // the engine was idle, or waited: the epoch would measure the pause
    steps_ = 0, tokens_ = seconds_ = sequences_ = 0;
    return;
  }
  ++steps_;
  tokens_ += tokens;
  seconds_ += gap;
  sequences_ += sequences;
  if (steps_ >= kEpochSteps) end_epoch();
}

void GoodputGate::end_epoch() {
  const uint32_t load = std::bit_width(uint32_t(std::lround(sequences_ / steps_)));
  Load& l = loads_[load];
  (drafting_ ? l.drafting : l.plain).add(tokens_ / seconds_);
  rates_[load] = Rates{l.drafting.mean(), l.plain.mean()};
  ++epochs_;
  steps_ = 0, tokens_ = seconds_ = sequences_ = 0;
  // The next epoch: the mode not yet measured at this load, else the better one but for a probe of the
  // other every kProbeEvery epochs.
  if (l.drafting.weight == 0 || l.plain.weight == 0) {
    drafting_ = l.drafting.weight == 0;
    return;
  }
  const bool better = l.drafting.mean() >= l.plain.mean();
  drafting_ = epochs_ % kProbeEvery == 0 ? !better : better;
}

}  // namespace tokenhost
