// An MoE engine's expert parallelism as its worker runs it (plugin/expert_partitions.hpp computes;
// this decides when to rebalance and reports): after each step, the partitions' time into
// tokenhost_moe_partition_seconds_total; every rebalance_steps steps, each layer's load since the last
// rebalance to the moe plugin's rebalance() and the placements that pass into effect before the next
// step, one log line per round that changed or refused something; the admin status' "expert_parallel".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/expert_load.hpp"
#include "metrics/metrics.hpp"
#include "plugin/expert_partitions.hpp"

namespace tokenhost {

class PluginInstance;

class ExpertBalance {
 public:
  ExpertBalance(std::string engine, std::vector<std::shared_ptr<ComputePool>> pools, std::vector<std::string> names,
                uint32_t n_layers, uint32_t n_experts, uint32_t slots_per_partition, uint32_t rebalance_steps,
                metrics::Registry* metrics);

  // The partitions a step computes moe's experts over; NULL (the engine's pool computes them) for a moe
  // plugin built before 1.10, whose experts() may not take concurrent calls (logged once per plugin).
  ExpertPartitions* partitions_for(const PluginInstance& moe);
  // After a step that ran: metrics, and a rebalance round when one is due.
  void after_step(const PluginInstance& moe, const ExpertLoad& load);
  nlohmann::json status() const;

 private:
  void rebalance_round(const PluginInstance& moe, const ExpertLoad& load);

  std::string engine_;
  ExpertPartitions partitions_;
  uint32_t rebalance_steps_;
  uint64_t steps_ = 0;
  std::vector<std::vector<uint64_t>> last_totals_;  // [layer]: ExpertLoad totals at the last round
  std::vector<double> exported_seconds_;            // [partition]: what /metrics has
  std::vector<double> window_imbalance_;            // [layer]: over partitions, under the last round's load
  uint64_t rounds_ = 0, changed_ = 0, refused_ = 0;
  std::string last_error_, older_plugin_;
  metrics::Family *seconds_ = nullptr, *rebalances_ = nullptr, *imbalance_ = nullptr;
};

}  // namespace tokenhost
