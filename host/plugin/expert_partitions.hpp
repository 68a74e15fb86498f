// Expert parallelism over compute partitions (an engine's expert_partitions, the README's "Expert
// parallelism"): each MoE layer's experts() runs once per partition, at once, each call on its
// partition's compute pool with the step's choices of the experts placed there (the others' weights 0,
// only the tokens that have a choice there), and the engine sums the partitions' outputs in partition
// order. The partition with the most work is the step's straggler: the time each spends is kept per
// layer, for rebalance() (th_moe_load.device_seconds) and the metrics. Between steps, every
// rebalance_steps steps, the engine's worker asks the moe plugin for a new placement of each layer
// (rebalance()) and applies what passes the checks: nothing waits for it but the next step, and on
// the CPU no weights move (a placement only says which partition computes an expert).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <tokenhost/tokenhost.h>

#include "base/compute_pool.hpp"
#include "base/expert_placement.hpp"

namespace tokenhost {

class PluginInstance;

// What one rebalance() of a layer did.
struct RebalanceOutcome {
  bool called = false;   // the plugin has rebalance() and was asked
  bool changed = false;  // a new placement was applied
  std::string error;     // the call failed or its answer was refused (the placement kept): why
  double imbalance_before = 0, imbalance_after = 0;  // under the load since the last rebalance
};

class ExpertPartitions {
 public:
  // One partition per pool (names for logs and metrics); slots_per_device as ExpertPlacement takes it.
  ExpertPartitions(std::vector<std::shared_ptr<ComputePool>> pools, std::vector<std::string> names, uint32_t n_layers,
                   uint32_t n_experts, uint32_t slots_per_device);
  ~ExpertPartitions();
  ExpertPartitions(const ExpertPartitions&) = delete;
  ExpertPartitions& operator=(const ExpertPartitions&) = delete;

  uint32_t devices() const { return uint32_t(pools_.size()); }
  const std::vector<std::string>& names() const { return names_; }
  ExpertPlacement& placement() { return placement_; }
  const ExpertPlacement& placement() const { return placement_; }

  // moe's experts() over the partitions for args (whose out it writes: the sum of the partitions'
  // outputs). A call that fails or throws fails the step (std::runtime_error naming the plugin and the
  // partition, or the PluginFault itself), out unwritten.
  void experts(const PluginInstance& moe, const th_moe_experts_args& args);

  // Seconds each partition spent in experts() of layer since the last take (zeroed), and in all.
  std::vector<double> take_seconds(uint32_t layer);
  const std::vector<double>& total_seconds() const { return total_seconds_; }

  // Asks moe's rebalance() for layer's placement under `tokens` per expert (routed since the last
  // call) and applies a checked answer. Throws nothing: a failure is in the outcome.
  RebalanceOutcome rebalance(const PluginInstance& moe, uint32_t layer, const std::vector<uint64_t>& tokens);

 private:
  // A thread per partition, pinned with its pool, that runs the calls given to it.
  struct Runner {
    std::thread thread;
    std::mutex mutex;
    std::condition_variable wake, done;
    std::function<void()> job;  // guarded by mutex
    bool busy = false, stop = false;
    std::exception_ptr error;
  };
  void serve(size_t partition);

  std::vector<std::shared_ptr<ComputePool>> pools_;
  std::vector<std::string> names_;
  ExpertPlacement placement_;
  std::vector<std::unique_ptr<Runner>> runners_;
  std::vector<double> seconds_;  // [layer][partition] since the last take
  std::vector<double> total_seconds_;
  // experts()'s buffers, kept between calls.
  std::vector<int32_t> device_of_choice_;
  struct Part {
    std::vector<uint32_t> tokens;  // the step's tokens with a choice here
    std::vector<float> x, weights, out;
    std::vector<int32_t> ids;
    double seconds = 0;
  };
  std::vector<Part> parts_;
};

}  // namespace tokenhost
