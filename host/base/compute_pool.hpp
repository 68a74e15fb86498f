// The compute pool: worker threads, one per core, that split the dense math of a step. Steps run on
// the engines' worker actors (their own threads), never on CAF's cooperative scheduler; the pool lets
// one step use every core. Between jobs a thread spins a little ($TOKENHOST_SPIN_US, default 50
// microseconds), then checks while yielding its core ($TOKENHOST_YIELD_US, default 1000), before it
// sleeps: a step's products come back to back, and waking a sleeping thread is slow.
#pragma once

#include <atomic>
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

  // Calls fn(begin, end) over [0, n) split into contiguous ranges, the calling thread taking part;
  // returns when all are done. Calls from several threads take turns. With grain 0, one range per
  // thread, of equal sizes; otherwise ranges of grain indices (the last one shorter), which the
  // threads claim in order as they finish the previous: a thread that the OS runs late does less. At
  // most max_threads threads take part, the calling one included (0: all).
  void parallel_for(size_t n, const std::function<void(size_t begin, size_t end)>& fn, size_t grain = 0,
                    size_t max_threads = 0);
  size_t threads() const { return workers_.size() + 1; }

 private:
  void run(size_t index);
  void work(size_t index, const std::function<void(size_t, size_t)>& fn, size_t n, size_t grain);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;  // guarded by mutex_
  size_t n_ = 0, grain_ = 0, participants_ = 0;
  std::atomic<size_t> next_{0};          // the next range to claim, with grain_ > 0
  std::atomic<uint64_t> generation_{0};  // bumped (under mutex_) for each job
  std::atomic<size_t> pending_{0};       // workers still on the current job
  bool stop_ = false;
};

// The process-wide pool: $TOKENHOST_THREADS threads, or one per core.
ComputePool& compute_pool();

}  // namespace tokenhost
