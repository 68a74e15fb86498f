// Tokens routed to each expert of each MoE layer: what shows where an MoE engine's load goes (the
// admin status, tokenhost_moe_expert_tokens_total, the dashboard's heat map) and what expert
// balancing reads. The backend counts every gate() choice of a step (after checking it); the engine's
// worker, which runs the steps, reads the totals and drains what each step added, between steps: one
// thread, no lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tokenhost {

class ExpertLoad {
 public:
  ExpertLoad(uint32_t n_layers, uint32_t n_experts)
      : n_layers_(n_layers), n_experts_(n_experts), total_(size_t(n_layers) * n_experts), fresh_(total_.size()) {}

  uint32_t n_layers() const { return n_layers_; }
  uint32_t n_experts() const { return n_experts_; }

  // Counts a gate's choices for layer: ids[i] for i < n (n_tokens x k), each whose weights[i] is not 0
  // (a choice of weight 0 was dropped: no expert computes it). "" when every id is an expert of the
  // layer; else what is wrong (the first id outside [0, n_experts)), counting nothing.
  std::string add(uint32_t layer, const int32_t* ids, const float* weights, size_t n) {
    if (layer >= n_layers_) return "layer " + std::to_string(layer) + " of a model of " + std::to_string(n_layers_);
    if (std::string wrong = check(layer, ids, n, n_experts_); !wrong.empty()) return wrong;
    uint64_t* row = &fresh_[size_t(layer) * n_experts_];
    for (size_t i = 0; i < n; ++i)
      if (weights[i] != 0.0f) ++row[ids[i]];
    return "";
  }

  // The check add() makes, for a caller that counts nothing: "" when every id is in [0, n_experts).
  static std::string check(uint32_t layer, const int32_t* ids, size_t n, uint32_t n_experts) {
    for (size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || uint32_t(ids[i]) >= n_experts)
        return "expert " + std::to_string(ids[i]) + " (choice " + std::to_string(i) + " of layer " + std::to_string(layer) +
               ") outside the layer's " + std::to_string(n_experts) + " experts";
    return "";
  }

  // Layer's tokens per expert since the engine started, what the last drain() took included.
  std::vector<uint64_t> totals(uint32_t layer) const {
    std::vector<uint64_t> out(n_experts_);
    for (uint32_t e = 0; e < n_experts_; ++e) out[e] = total_[size_t(layer) * n_experts_ + e] + fresh_[size_t(layer) * n_experts_ + e];
    return out;
  }

  // Calls f(layer, expert, tokens) for each count added since the last drain (nonzero only), and moves
  // them into the totals.
  template <class F>
  void drain(F&& f) {
    for (size_t i = 0; i < fresh_.size(); ++i) {
      if (fresh_[i] == 0) continue;
      f(uint32_t(i / n_experts_), uint32_t(i % n_experts_), fresh_[i]);
      total_[i] += fresh_[i];
      fresh_[i] = 0;
    }
  }

  // How uneven a layer's load is: the busiest expert's tokens over the mean per expert (1 is even, E
  // is every token on one of E experts); 0 before any token.
  static double imbalance(const std::vector<uint64_t>& tokens) {
    if (tokens.empty()) return 0;
    uint64_t sum = 0, most = 0;
    for (uint64_t t : tokens) sum += t, most = std::max(most, t);
    return sum == 0 ? 0.0 : double(most) * double(tokens.size()) / double(sum);
  }

 private:
  uint32_t n_layers_, n_experts_;
  std::vector<uint64_t> total_, fresh_;  // [layer][expert]
};

}  // namespace tokenhost
