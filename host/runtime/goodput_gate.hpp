// The draft controller's check against the whole server's measure: whether drafting, as the step cost
// model chooses it, really gives more tokens per second of wall time than not drafting at the load the
// engine has. The step model prices draft rows by the worker's seconds; every token also costs the
// engine, the gateway and the clients CPU that model does not see (on a 2-core machine, as much as the
// step at high load). So the engine alternates epochs of steps: mostly in the mode that measured best at
// the present load (the mean running sequences, in powers of two), now and then (one epoch in
// kProbeEvery) in the other, and keeps each mode's recent tokens per wall second per load. An epoch not
// drafting costs the proposer nothing: it is not asked.
#pragma once

#include <cstdint>
#include <map>

namespace tokenhost {

class GoodputGate {
 public:
  static constexpr uint32_t kEpochSteps = 32;   // steps per epoch
  static constexpr uint32_t kProbeEvery = 8;    // one epoch in this many runs the mode measured worse
  static constexpr double kMaxGapSeconds = 0.5; // a longer pause between steps (idle) discards the epoch
  static constexpr double kDecay = 0.7;         // weight of an epoch's predecessors, per epoch

  // Whether the present epoch drafts.
  bool drafting() const { return drafting_; }
  // A step finished at now_ns, giving `tokens` tokens to `sequences` decoding sequences.
  void observe(uint64_t now_ns, uint32_t tokens, uint32_t sequences);

  struct Rates {
    double drafting = 0, plain = 0;  // tokens per wall second, recent epochs (0: none measured)
  };
  // By load: the bit width of the epoch's mean decoding sequences (1: one, 2: 2-3, 3: 4-7, ...).
  const std::map<uint32_t, Rates>& rates() const { return rates_; }
  uint64_t epochs() const { return epochs_; }

 private:
  struct Mean {
    double weight = 0, sum = 0;
    void add(double x) { weight = weight * kDecay + 1, sum = sum * kDecay + x; }
    double mean() const { return weight > 0 ? sum / weight : 0; }
  };
  struct Load {
    Mean drafting, plain;
  };
  void end_epoch();

  bool drafting_ = true;
  uint64_t last_ns_ = 0, epochs_ = 0;
  uint32_t steps_ = 0;
  double tokens_ = 0, seconds_ = 0, sequences_ = 0;
  std::map<uint32_t, Load> loads_;
  std::map<uint32_t, Rates> rates_;
};

}  // namespace tokenhost
