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

}  // namespace tokenhost
