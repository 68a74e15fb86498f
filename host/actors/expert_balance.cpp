#include "actors/expert_balance.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include <spdlog/spdlog.h>

#include "plugin/instance.hpp"

namespace tokenhost {

ExpertBalance::ExpertBalance(std::string engine, std::vector<std::shared_ptr<ComputePool>> pools, std::vector<std::string> names,
                             uint32_t n_layers, uint32_t n_experts, uint32_t slots_per_partition, uint32_t rebalance_steps,
                             metrics::Registry* metrics)
    : engine_(std::move(engine)),
      partitions_(std::move(pools), std::move(names), n_layers, n_experts, slots_per_partition),
      rebalance_steps_(rebalance_steps),
      last_totals_(n_layers, std::vector<uint64_t>(n_experts, 0)),
      exported_seconds_(partitions_.devices(), 0.0),
      window_imbalance_(n_layers, 0.0) {
  if (metrics != nullptr) {
    seconds_ = &metrics->family(metrics::Type::counter, "tokenhost_moe_partition_seconds_total",
                                "Seconds an MoE engine's expert partition spent computing its experts (the busiest is each step's straggler)",
                                {"engine", "partition"});
    rebalances_ = &metrics->family(metrics::Type::counter, "tokenhost_moe_rebalances_total",
                                   "An MoE engine's rebalance() calls per layer, by outcome: changed (a new placement applied), kept, refused (failed or answered a placement the engine refused)",
                                   {"engine", "outcome"});
    imbalance_ = &metrics->family(metrics::Type::gauge, "tokenhost_moe_partition_imbalance",
                                  "Per MoE layer: the busiest expert partition's tokens over the mean, under the load since the previous rebalance and the placement now (1: even)",
                                  {"engine", "layer"});
  }
  spdlog::info("engine {}: experts over {} partitions ({} slots each), rebalance every {} steps", engine_, partitions_.devices(),
               slots_per_partition, rebalance_steps_);
}

ExpertPartitions* ExpertBalance::partitions_for(const PluginInstance& moe) {
  if (moe.library().abi_minor() >= 10) return &partitions_;
  if (older_plugin_ != moe.id() + moe.version()) {
    older_plugin_ = moe.id() + moe.version();
    spdlog::warn("engine {}: moe plugin {} {} is built against ABI 1.{}: its experts compute on the engine's pool, not over the expert partitions",
                 engine_, moe.id(), moe.version(), moe.library().abi_minor());
  }
  return nullptr;
}

void ExpertBalance::after_step(const PluginInstance& moe, const ExpertLoad& load) {
  if (seconds_ != nullptr)
    for (uint32_t p = 0; p < partitions_.devices(); ++p) {
      const double total = partitions_.total_seconds()[p];
      if (total > exported_seconds_[p]) seconds_->add({engine_, partitions_.names()[p]}, total - exported_seconds_[p]);
      exported_seconds_[p] = total;
    }
  ++steps_;
  if (rebalance_steps_ > 0 && steps_ % rebalance_steps_ == 0) rebalance_round(moe, load);
}

void ExpertBalance::rebalance_round(const PluginInstance& moe, const ExpertLoad& load) {
  const auto started = std::chrono::steady_clock::now();
  ++rounds_;
  uint32_t changed = 0, refused = 0;
  double before = 0, after = 0;
  for (uint32_t l = 0; l < load.n_layers(); ++l) {
    std::vector<uint64_t> tokens = load.totals(l);
    for (size_t e = 0; e < tokens.size(); ++e) tokens[e] -= std::exchange(last_totals_[l][e], tokens[e]);
    const RebalanceOutcome outcome = partitions_.rebalance(moe, l, tokens);
    if (!outcome.called) return;  // a plugin without rebalance(): the placement stays as it started
    window_imbalance_[l] = outcome.imbalance_after;
    if (imbalance_ != nullptr) imbalance_->set({engine_, std::to_string(l)}, outcome.imbalance_after);
    const char* what = !outcome.error.empty() ? "refused" : outcome.changed ? "changed" : "kept";
    if (rebalances_ != nullptr) rebalances_->add({engine_, what}, 1);
    if (!outcome.error.empty()) {
      ++refused;
      last_error_ = "layer " + std::to_string(l) + ": " + outcome.error;
    }
    if (outcome.changed) {
      ++changed;
      before = std::max(before, outcome.imbalance_before);
      after = std::max(after, outcome.imbalance_after);
    }
  }
  changed_ += changed;
  refused_ += refused;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  if (changed > 0)
    spdlog::info("engine {}: {} rebalanced {} of {} layers' experts (worst layer's imbalance over partitions {:.2f} -> {:.2f}) in {:.2f} ms",
                 engine_, moe.id(), changed, load.n_layers(), before, after, ms);
  if (refused > 0)
    spdlog::warn("engine {}: {} rebalance kept the placement of {} layers: {}", engine_, moe.id(), refused, last_error_);
}

nlohmann::json ExpertBalance::status() const {
  const ExpertPlacement& placement = partitions_.placement();
  nlohmann::json layers = nlohmann::json::array();
  for (uint32_t l = 0; l < placement.n_layers(); ++l)
    layers.push_back({{"layer", l},
                      {"slots_per_partition", placement.slots_per_device(l)},
                      {"slot_expert", placement.slots(l)},
                      {"imbalance", window_imbalance_[l]}});
  nlohmann::json j = {{"partitions", partitions_.names()},
                      {"partition_seconds", partitions_.total_seconds()},
                      {"rebalance_steps", rebalance_steps_},
                      {"rebalances", {{"rounds", rounds_}, {"changed", changed_}, {"refused", refused_}}},
                      {"layers", std::move(layers)}};
  if (!last_error_.empty()) j["last_refusal"] = last_error_;
  return j;
}

}  // namespace tokenhost
