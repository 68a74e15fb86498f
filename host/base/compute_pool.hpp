// The compute pool: worker threads, one per core, that split the dense math of a step. Steps run on
// the engines' worker actors (their own threads), never on CAF's cooperative scheduler; the pool lets
// one step use every core. Between jobs a thread spins a little ($TOKENHOST_SPIN_US, default 50
// microseconds), then checks while yielding its core ($TOKENHOST_YIELD_US, default 1000), before it
// sleeps: a step's products come back to back, and waking a sleeping thread is slow.
//
// Compute partitions: an engine may have a pool of its own (a manifest's [partitions.NAME], its threads
// optionally pinned to cores), so that two engines of one process, a prefill and a decode engine, run
// side by side instead of taking turns on the process-wide pool. The engine's worker thread makes its
// partition the thread's pool for each step (UseComputePool); compute_pool() answers the calling
// thread's pool, so the kernels need not know which engine they serve.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tokenhost {

class ComputePool {
 public:
  // threads: the calling thread included (threads - 1 workers). cores: when not empty, each worker
  // thread is pinned to these cores (the set, not one core each; a core the machine lacks is an error
  // the manifest reader refuses first).
  explicit ComputePool(size_t threads, std::vector<int> cores = {});
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
  const std::vector<int>& cores() const { return cores_; }
  // parallel_for calls so far: shows an operator (status "partitions") that a partition's engines
  // compute on it.
  uint64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }

 private:
  void run(size_t index);
  void work(size_t index, const std::function<void(size_t, size_t)>& fn, size_t n, size_t grain);

  std::vector<std::thread> workers_;
  const std::vector<int> cores_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;  // guarded by mutex_
  size_t n_ = 0, grain_ = 0, participants_ = 0;
  std::atomic<size_t> next_{0};          // the next range to claim, with grain_ > 0
  std::atomic<uint64_t> generation_{0};  // bumped (under mutex_) for each job
  std::atomic<size_t> pending_{0};       // workers still on the current job
  bool stop_ = false;
  std::atomic<uint64_t> jobs_{0};
};

// The calling thread's pool: the one a UseComputePool on this thread set, else the process-wide pool
// ($TOKENHOST_THREADS threads, or one per core).
ComputePool& compute_pool();
// Whether a UseComputePool chose the calling thread's pool (false: compute_pool() is the process-wide one).
bool compute_pool_chosen();
ComputePool& process_compute_pool();
// Sets the process-wide pool's threads (0: $TOKENHOST_THREADS, else one per core) before its first use
// (a manifest's [server] compute_threads, serve --threads). False, nothing changed, once it exists.
bool set_process_compute_threads(size_t threads);

// Makes pool the calling thread's compute_pool() until destroyed (NULL: leaves it as it is). Nests.
// A pool with cores pins the calling thread to them too (it takes part in every parallel_for), once,
// and leaves it pinned: the thread is an engine's worker, which serves that engine alone (a step
// would otherwise pay two system calls).
class UseComputePool {
 public:
  explicit UseComputePool(ComputePool* pool);
  ~UseComputePool();
  UseComputePool(const UseComputePool&) = delete;
  UseComputePool& operator=(const UseComputePool&) = delete;

 private:
  ComputePool* previous_;
};

// The cores the calling thread may run on (empty when the system cannot say).
std::vector<int> thread_cores();
// Pins the calling thread to cores (all of them: empty). Returns false when the system refuses.
bool pin_thread(const std::vector<int>& cores);

}  // namespace tokenhost
