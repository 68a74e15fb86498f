#include "speculation/draft_controller.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>

namespace tokenhost {
namespace {

// Acceptance before any evidence, and how many tried tokens that prior weighs.
constexpr double kPriorAcceptance = 0.5, kPriorTried = 4;
// How much of the pooled rate a sequence's own estimate starts from (in tried tokens).
constexpr double kSeqPriorTried = 2;
// Fading: of a sequence's evidence per draft and per step without one; of the pooled evidence per draft
// and per step without any draft; of the step cost fit per step.
constexpr double kSeqDecay = 0.9, kPooledDecay = 0.99, kCostDecay = 0.98;
// Before the fit (every step had the same rows): a row costs this share of a one-row step.
constexpr double kPriorRowShare = 0.1;
// A row never costs less than this share of a mean step per row in the model: noise must not make
// draft rows look free.
constexpr double kMinRowShare = 0.01;
// Drafts are verified only where the model predicts the step at least this much more goodput than
// without them: its estimates are noisy, and rows cost the machine more than the worker's step time
// (every token also goes through the engine and the gateway).
constexpr double kMinPredictedGain = 0.05;
// Steps of up to this many rows keep their mean cost per row count.
constexpr uint32_t kMaxMeasuredRows = 1024;
// A row count's mean cost counts once it has (about) two steps in it.
constexpr double kMeasured = 1.9;

double estimate(double kept, double tried, double prior, double prior_tried) {
  return std::clamp((kept + prior * prior_tried) / (tried + prior_tried), 0.0, 1.0);
}

}  // namespace

void DraftController::Mean::add(double x, uint64_t now) {
  if (!fresh(now)) weight = sum = 0;  // forgotten: what it held was measured under another load
  weight = weight * 0.98 + 1;
  sum = sum * 0.98 + x;
  last = now;
}

bool DraftController::Mean::fresh(uint64_t now) const { return weight > 0 && now - std::min(now, last) < kForgetAfterSteps; }

bool DraftController::Mean::measured(uint64_t now) const { return fresh(now) && weight >= kMeasured; }

double DraftController::propose_cost_per_token() const {
  // One propose() counts at once (a draft model's cost shows in its first call); it too is forgotten
  // when no call was measured for kForgetAfterSteps steps.
  return propose_per_token_.fresh(steps_) ? propose_per_token_.mean() : 0;
}

const char* draft_policy_name(DraftPolicy p) { return p == DraftPolicy::fixed ? "fixed" : "adaptive"; }

bool parse_draft_policy(const std::string& name, DraftPolicy& out) {
  if (name == "fixed") out = DraftPolicy::fixed;
  else if (name == "adaptive") out = DraftPolicy::adaptive;
  else return false;
  return true;
}

std::vector<uint32_t> best_draft_lengths(const std::vector<double>& alpha, const std::vector<uint32_t>& caps, double base_tokens,
                                         uint32_t base_rows, const std::function<double(uint32_t rows)>& cost, double min_gain) {
  // Every draft row on offer with its expected tokens: row j (from 1) of sequence i is worth alpha^j.
  struct Gain {
    double value;
    uint32_t depth;
    size_t seq;
  };
  std::vector<Gain> gains;
  for (size_t i = 0; i < caps.size(); ++i) {
    const double a = std::clamp(alpha.at(i), 0.0, 1.0);
    double v = 1;
    for (uint32_t j = 1; j <= caps[i]; ++j) gains.push_back({v *= a, j, i});
  }
  // Largest first; equal gains shallower first, so that the m best are a prefix of each sequence's rows.
  std::stable_sort(gains.begin(), gains.end(),
                   [](const Gain& x, const Gain& y) { return std::tie(y.value, x.depth) < std::tie(x.value, y.depth); });
  auto goodput = [&](double tokens, uint32_t rows) {
    const double seconds = cost(rows);
    return seconds > 0 ? tokens / seconds : tokens > 0 ? INFINITY : 0;
  };
  double tokens = base_tokens, best = goodput(base_tokens, base_rows);
  size_t best_m = 0;
  const double plain = best;
  for (size_t m = 1; m <= gains.size(); ++m) {
    tokens += gains[m - 1].value;
    const double g = goodput(tokens, base_rows + uint32_t(m));
    if (g > best * (1 + 1e-12)) best = g, best_m = m;
  }
  if (best < plain * (1 + min_gain)) best_m = 0;
  std::vector<uint32_t> k(caps.size(), 0);
  for (size_t m = 0; m < best_m; ++m) ++k[gains[m].seq];
  return k;
}

std::vector<uint32_t> DraftController::choose(const std::vector<Offer>& offers, uint32_t base_tokens, uint32_t base_rows) const {
  std::vector<uint32_t> caps;
  for (const auto& o : offers) caps.push_back(o.tokens);
  if (policy_ == DraftPolicy::fixed) return caps;
  // What a step without drafts costs here is unknown (never measured, or not for kForgetAfterSteps
  // steps) and no line was fitted to guess it: this step goes without, and measures it. An engine
  // whose proposer offers a draft every step would otherwise never learn what drafting costs it.
  if (const auto it = by_rows_.find(base_rows);
      base_rows <= kMaxMeasuredRows && !cost_fitted() && steps_ > 0 && (it == by_rows_.end() || !it->second.measured(steps_)))
    return std::vector<uint32_t>(offers.size(), 0);
  std::vector<double> alpha;
  for (const auto& o : offers) alpha.push_back(acceptance(o.seq_id));
  // Costs from base_rows up, never falling as rows are added (a step measured cheaper than a smaller
  // one is noise, not a reason to add rows).
  std::vector<double> envelope;
  // A step that also prefills (more rows than sampled tokens) is charged as the decode step of its
  // sampled tokens, plus what the draft rows add to the real step: the prefill rows are work the
  // engine does either way. Charged at their full cost they would make the step's own goodput low and
  // any draft look cheap beside it, while the draft rows still cost what they cost in a decode step.
  const double decode_cost = base_rows > base_tokens ? step_cost(std::max(base_tokens, 1u)) : 0;
  auto cost = [&](uint32_t rows) {
    while (base_rows + envelope.size() <= rows) {
      const double raw = step_cost(base_rows + uint32_t(envelope.size()));
      envelope.push_back(envelope.empty() ? raw : std::max(raw, envelope.back()));
    }
    const double step = base_rows > base_tokens ? decode_cost + (envelope[rows - base_rows] - envelope[0]) : envelope[rows - base_rows];
    // Each draft row also cost the proposer its share of propose() (nothing for lookup proposers).
    return step + propose_cost_per_token() * double(rows - base_rows);
  };
  return best_draft_lengths(alpha, caps, base_tokens, base_rows, cost, kMinPredictedGain);
}

void DraftController::observe_step(uint32_t rows, double seconds, bool drafted) {
  if (!(seconds >= 0) || rows == 0) return;
  ++steps_;
  (drafted ? drafted_steps_ : plain_steps_).add(seconds, steps_);
  if (rows <= kMaxMeasuredRows) by_rows_[rows].add(seconds, steps_);
  if (!drafted) pooled_.tried *= kPooledDecay, pooled_.kept *= kPooledDecay;
  const double x = rows;
  w_ = w_ * kCostDecay + 1;
  sx_ = sx_ * kCostDecay + x;
  sy_ = sy_ * kCostDecay + seconds;
  sxx_ = sxx_ * kCostDecay + x * x;
  sxy_ = sxy_ * kCostDecay + x * seconds;
}

void DraftController::observe_propose(uint32_t tokens, double seconds) {
  if (tokens == 0 || !(seconds >= 0)) return;
  propose_per_token_.add(seconds / tokens, steps_);
}

void DraftController::observe_draft(uint64_t seq_id, uint32_t drafted, uint32_t accepted) {
  if (drafted == 0) return;
  accepted = std::min(accepted, drafted);
  // Tokens tried: the accepted ones and the first rejected one (those after it were never judged).
  const double tried = accepted + (accepted < drafted ? 1 : 0);
  Evidence& e = seqs_[seq_id];
  e.tried = e.tried * kSeqDecay + tried;
  e.kept = e.kept * kSeqDecay + accepted;
  pooled_.tried = pooled_.tried * kPooledDecay + tried;
  pooled_.kept = pooled_.kept * kPooledDecay + accepted;
}

void DraftController::observe_no_draft(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it != seqs_.end()) it->second.tried *= kSeqDecay, it->second.kept *= kSeqDecay;
}

void DraftController::forget(uint64_t seq_id) { seqs_.erase(seq_id); }

double DraftController::pooled_acceptance() const {
  return estimate(pooled_.kept, pooled_.tried, kPriorAcceptance, kPriorTried);
}

double DraftController::acceptance(uint64_t seq_id) const {
  const double pooled = pooled_acceptance();
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? pooled : estimate(it->second.kept, it->second.tried, pooled, kSeqPriorTried);
}

bool DraftController::cost_fitted() const {
  // Rows must have varied (a weighted variance of at least a quarter row squared) over several steps.
  return w_ >= 4 && (sxx_ / w_ - (sx_ / w_) * (sx_ / w_)) >= 0.25;
}

double DraftController::cost_per_row() const {
  if (w_ == 0) return kPriorRowShare;
  const double mx = sx_ / w_, my = sy_ / w_;
  if (!cost_fitted()) return kPriorRowShare * my / (1 + kPriorRowShare * mx);
  const double b = (sxy_ / w_ - mx * my) / (sxx_ / w_ - mx * mx);
  return std::max(b, kMinRowShare * my / std::max(mx, 1.0));
}

double DraftController::cost_fixed() const {
  if (w_ == 0) return 1;
  const double mx = sx_ / w_, my = sy_ / w_;
  return std::max(0.0, my - cost_per_row() * mx);
}

double DraftController::step_cost(uint32_t rows) const {
  // The measured row counts (two steps or more each) nearest below and above, found from rows outward:
  // this runs for every row count a step may reach.
  auto measured = [this](const std::pair<const uint32_t, Mean>& e) { return e.second.measured(steps_); };
  const std::pair<const uint32_t, Mean>*below = nullptr, *below2 = nullptr, *above = nullptr;
  const auto from = by_rows_.lower_bound(rows);
  for (auto it = from; it != by_rows_.end() && above == nullptr; ++it)
    if (measured(*it)) above = &*it;
  if (above != nullptr && above->first == rows) return above->second.mean();
  for (auto it = std::make_reverse_iterator(from); it != by_rows_.rend() && below2 == nullptr; ++it)
    if (measured(*it)) (below == nullptr ? below : below2) = &*it;
  if (below != nullptr && above != nullptr) {  // between two measured counts: on the line joining them
    const double f = double(rows - below->first) / double(above->first - below->first);
    return below->second.mean() + f * (above->second.mean() - below->second.mean());
  }
  if (below != nullptr) {
    // Past the largest measured count: from it, at the steeper of the fitted line's slope and the slope
    // between it and the count before it. The line, fitted to every decode step, may come from another
    // load (a few rows, where a row costs little); the local slope is what rows cost here.
    double slope = cost_per_row();
    if (below2 != nullptr)
      slope = std::max(slope, (below->second.mean() - below2->second.mean()) / double(below->first - below2->first));
    return below->second.mean() + slope * double(rows - below->first);
  }
  // Fewer rows than any measured: the line, at most that count's cost. (Not that count's cost itself:
  // an engine that drafted in every step never measured a step without drafts, and pricing one at a
  // drafted step's cost would make every draft look free.)
  const double line = cost_fixed() + cost_per_row() * rows;
  if (above != nullptr) return std::min(line, above->second.mean());
  return line;
}

std::vector<std::pair<uint32_t, double>> DraftController::measured_costs(size_t limit) const {
  std::vector<std::pair<uint32_t, double>> out;
  for (const auto& [rows, m] : by_rows_) {
    if (out.size() >= limit) break;
    if (m.measured(steps_)) out.emplace_back(rows, m.mean());
  }
  return out;
}

}  // namespace tokenhost
