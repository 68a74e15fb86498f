// [partitions.NAME] of a deployment manifest: compute partitions, each a pool of compute threads of its
// own (base/compute_pool.hpp), optionally pinned to cores. An engine that names one (`partition =
// "NAME"`) computes its steps on that pool alone; the others share the process-wide pool. Two engines
// in separate partitions (a prefill and a decode engine) run side by side instead of taking turns.
//
//   [partitions.prefill]
//   threads = 1     # compute threads, the engine's own worker thread included (default: cores' count)
//   cores = [0]     # optional: pins the partition's threads to these cores
//
// Engines may share a partition (they take turns on it, as on the process-wide pool).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/toml_reader.hpp"

namespace tokenhost {

struct PartitionDecl {
  std::string name;
  uint32_t threads = 1;
  std::vector<int> cores;  // empty: not pinned
};

// The most threads one partition may have.
constexpr uint32_t kMaxPartitionThreads = 1024;

// Reads the [partitions] table; cores are checked against this machine's (std::thread::
// hardware_concurrency). Throws ManifestError naming the table and key.
std::map<std::string, PartitionDecl> read_partitions(const TomlReader& r, const toml::table& partitions);

// "NAME: N threads[ on cores a,b]", for logs and status.
std::string describe(const PartitionDecl& p);

// An MoE engine's expert parallelism (plugin/expert_partitions.hpp): its experts compute on these
// partitions, one experts() call per partition at once; the moe plugin's rebalance() moves them.
//
//   [engines.moe]
//   expert_partitions = ["experts0", "experts1"]   # two [partitions] at least
//   expert_replicas = 2     # spare expert slots over the partitions, for replicas of hot experts
//   rebalance_steps = 100   # steps between rebalance() calls (0: never)
struct ExpertParallelDecl {
  std::vector<std::string> partitions;  // empty: the engine's own pool computes its experts
  uint32_t replicas = 0;
  uint32_t rebalance_steps = 100;
  // Expert slots on each partition: enough for every expert and the replicas.
  uint32_t slots_per_partition(uint32_t n_experts) const {
    const uint64_t n = partitions.empty() ? 1 : partitions.size();
    return uint32_t((uint64_t(n_experts) + replicas + n - 1) / n);
  }
};

// The engine table's expert_partitions, expert_replicas and rebalance_steps (ctx names the table).
// Throws ManifestError for an unknown or repeated partition, fewer than two, a dense model (n_experts 0)
// or fewer experts than partitions, and the other keys without expert_partitions.
ExpertParallelDecl read_expert_parallel(const TomlReader& r, const toml::table& engine, const std::string& ctx,
                                        const std::map<std::string, PartitionDecl>& partitions, uint32_t n_experts);

}  // namespace tokenhost
