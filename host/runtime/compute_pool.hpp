// The compute pool: worker threads, one per core, that split the dense math of a step. Steps run on
// the engines' worker actors (their own threads), never on CAF's cooperative scheduler; the pool lets
// one step use every core.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tokenhost {

class ComputePool {
 public:
  explicit ComputePool(size_t threads);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // Calls fn(begin, end) over [0, n) split into about threads() contiguous ranges, the calling thread
  // taking one; returns when all are done. Calls from several threads take turns.
  void parallel_for(size_t n, const std::function<void(size_t begin, size_t end)>& fn);
  size_t threads() const { return workers_.size() + 1; }

 private:
  void run(size_t index);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t n_ = 0, generation_ = 0, pending_ = 0;
  bool stop_ = false;
};

// The process-wide pool: $TOKENHOST_THREADS threads, or one per core.
ComputePool& compute_pool();

}  // namespace tokenhost
