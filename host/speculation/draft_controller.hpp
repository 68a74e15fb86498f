// Speculative decoding's draft-length controller: how many of the draft tokens a proposer offered each
// sequence one step verifies. Policy `fixed` verifies them all. Policy `adaptive` picks the lengths
// that maximize the step's expected goodput (tokens out per second) from two measured things: each
// sequence's acceptance rate (with the engine's pooled rate as its prior) and the cost of a decode step
// as a function of its rows: the mean measured at that row count where there is one, else from the
// measured counts around it (the matmul kernels take rows in groups, so a step of five rows may cost
// far more than one of four: one line would miss that), or a line a + b * rows fitted to every decode
// step. Drafts are verified only where the predicted gain is at least 5%. Measurements age: a row
// count not measured for kForgetAfterSteps decode steps is forgotten and measured again (drafting, or
// a step without drafts), so that the controller follows a machine whose costs change. A draft token is worth its
// probability of being kept; it costs what its row adds to the step: as batches grow, a row's share of
// the step grows and the controller drafts less, down to nothing, so that speculation does not make
// the engine slower than plain decoding. Acceptance alone would not do (it stays flat while the best
// length changes with the load).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <string>
#include <vector>

namespace tokenhost {

enum class DraftPolicy { fixed, adaptive };

// "fixed" / "adaptive"; parse returns false for any other name.
const char* draft_policy_name(DraftPolicy p);
bool parse_draft_policy(const std::string& name, DraftPolicy& out);

// The draft lengths k[i] <= caps[i] that maximize
//   (base_tokens + sum_i sum_{j=1..k[i]} alpha[i]^j) / cost(base_rows + sum_i k[i]),
// the expected tokens a step yields per second of it when the j-th draft token of sequence i is kept
// with probability alpha[i]^j (each kept while the ones before it are). base_tokens: the tokens the
// step yields without drafts; base_rows: its rows without drafts; cost: seconds of a step of that many
// rows (> 0). Ties go to the fewer draft rows, and no draft at all unless the best beats none by the
// factor 1 + min_gain. Exact for any cost: each sequence's marginal gains fall with j, so the best set
// of m draft rows is the m largest gains, and every m is tried.
std::vector<uint32_t> best_draft_lengths(const std::vector<double>& alpha, const std::vector<uint32_t>& caps, double base_tokens,
                                         uint32_t base_rows, const std::function<double(uint32_t rows)>& cost,
                                         double min_gain = 0);

class DraftController {
 public:
  explicit DraftController(DraftPolicy policy = DraftPolicy::adaptive) : policy_(policy) {}

  DraftPolicy policy() const { return policy_; }

  // One sequence's draft as the proposer offered it.
  struct Offer {
    uint64_t seq_id;
    uint32_t tokens;  // draft tokens offered (> 0)
  };
  // How many of each offer's tokens to verify (parallel to offers): all of them under `fixed`; under
  // `adaptive` the goodput-best lengths for a step of base_rows rows yielding base_tokens tokens, its
  // cost step_cost() made non-decreasing from base_rows up, plus propose_cost_per_token() for each
  // draft token (what drafting it cost: a draft model's forward passes). A step with prefill rows
  // (base_rows > base_tokens) is priced as a decode step of base_tokens rows plus what the draft rows
  // add to it: its prefill is done either way, and must not make draft rows look cheap.
  std::vector<uint32_t> choose(const std::vector<Offer>& offers, uint32_t base_tokens, uint32_t base_rows) const;

  // What a decode step showed: its rows (drafts included), the worker's seconds for it, whether it verified
  // any draft (a step without one lets the pooled evidence fade toward the prior, so that an engine
  // that stopped drafting tries again after a while).
  void observe_step(uint32_t rows, double seconds, bool drafted);
  // Measurements age with these steps: a row count's mean cost or the propose cost not observed for
  // about kForgetAfterSteps decode steps is forgotten (README: Speculative decoding).
  static constexpr uint64_t kForgetAfterSteps = 330;
  // A verified draft of seq_id: drafted tokens, accepted of them.
  void observe_draft(uint64_t seq_id, uint32_t drafted, uint32_t accepted);
  // A propose() call that returned `tokens` draft tokens in all and took `seconds` (the proposer's own
  // compute: a draft model's passes): the seconds a draft token costs before its verification.
  void observe_propose(uint32_t tokens, double seconds);
  // 0 once no propose() was measured for a while (Mean's ageing): drafting is then tried again.
  double propose_cost_per_token() const;
  void forget_propose_cost() { propose_per_token_ = {}; }
  // A step in which seq_id decoded a token without a draft: its evidence fades toward the pooled rate.
  void observe_no_draft(uint64_t seq_id);
  void forget(uint64_t seq_id);

  // The estimates, for the admin status and tests.
  double acceptance(uint64_t seq_id) const;  // the sequence's, or the pooled rate for one without evidence
  double pooled_acceptance() const;
  // The step cost model in seconds: the line's fit once steps of different row counts were seen, else
  // the prior (kPriorRowShare of the mean step per row); step_cost(rows): the mean measured at that row
  // count when there is one (two steps or more); between measured counts on the line joining them;
  // past the largest, from it at the steeper of the line's slope and the local one; below the
  // smallest, that one's; with none measured, the line.
  double cost_fixed() const;
  double cost_per_row() const;
  bool cost_fitted() const;
  double step_cost(uint32_t rows) const;
  // The row counts measured and their mean seconds, fewest rows first (at most `limit` of them).
  std::vector<std::pair<uint32_t, double>> measured_costs(size_t limit) const;
  // Mean seconds of recent steps with and without draft rows (0 before the first such step).
  double step_seconds_drafted() const { return drafted_steps_.mean(); }
  double step_seconds_plain() const { return plain_steps_.mean(); }

 private:
  // Evidence as decayed counts: tokens tried and tokens kept.
  struct Evidence {
    double tried = 0, kept = 0;
  };
  // A fading mean that is forgotten when it is not observed for kForgetAfterSteps decode steps (and
  // starts again at its next observation), so that a cost measured under one load and never again (a
  // row count the controller stopped drafting into) does not rule forever: one expensive measurement
  // once switched drafting off for good.
  struct Mean {
    double weight = 0, sum = 0;
    uint64_t last = 0;  // the decode step of the last observation
    void add(double x, uint64_t now);
    double mean() const { return weight > 0 ? sum / weight : 0; }
    bool fresh(uint64_t now) const;     // observed within kForgetAfterSteps steps
    bool measured(uint64_t now) const;  // fresh, with two steps or so in it
  };
  DraftPolicy policy_;
  uint64_t steps_ = 0;  // decode steps observed: the clock measurements age by
  std::map<uint64_t, Evidence> seqs_;
  Evidence pooled_;
  Mean drafted_steps_, plain_steps_;
  Mean propose_per_token_;  // seconds per draft token proposed
  std::map<uint32_t, Mean> by_rows_;  // decode step seconds by row count
  // Weighted least squares of seconds on rows, older steps fading.
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

}  // namespace tokenhost
