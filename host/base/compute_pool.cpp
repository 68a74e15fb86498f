#include "base/compute_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <pthread.h>
#include <sched.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tokenhost {
namespace {

std::pair<size_t, size_t> share(size_t n, size_t parts, size_t index) {
  size_t per = n / parts, extra = n % parts;
  size_t begin = index * per + std::min(index, extra);
  return {begin, begin + per + (index < extra ? 1 : 0)};
}

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// A forward pass issues its products back to back, microseconds apart: a thread that spins this long
// before sleeping picks up the next one without a futex wake-up (tens of microseconds each on a VM).
// Short enough that an idle pool costs nothing measurable.
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t{[] {
    const char* env = std::getenv("TOKENHOST_SPIN_US");
    return env ? std::max(0L, std::strtol(env, nullptr, 10)) : 50L;
  }()};
  return t;
}

// After spinning, a thread keeps checking for this long while yielding its core to any other thread
// that wants it, and only then sleeps. In the server the gaps between products are longer than the
// spin (the engine's actors, the HTTP threads and the client share the cores), and waking a sleeping
// thread costs a futex call plus, on a VM, waking an idle virtual CPU: with 50 us of spin alone a
// stream through HTTP lost 13-16% against `generate`; yielding for 1 ms more took most of that back
// (one stream, 110M Q8_0, alternating runs: 92-111 against 95-99 tokens/s).
std::chrono::microseconds yield_time() {
  static const std::chrono::microseconds t{[] {
    const char* env = std::getenv("TOKENHOST_YIELD_US");
    return env ? std::max(0L, std::strtol(env, nullptr, 10)) : 1000L;
  }()};
  return t;
}

template <class Ready>
bool spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + spin_time();
  for (int i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
  }
  const auto yield_until = until + yield_time();
  while (std::chrono::steady_clock::now() < yield_until) {
    if (ready()) return true;
    std::this_thread::yield();
  }
  return ready();
}

}  // namespace

ComputePool::ComputePool(size_t threads, std::vector<int> cores) : cores_(std::move(cores)) {
  for (size_t i = 1; i < std::max<size_t>(threads, 1); ++i)
    workers_.emplace_back([this, i] {
      if (!cores_.empty()) pin_thread(cores_);
      run(i);
    });
}

ComputePool::~ComputePool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ComputePool::work(size_t index, const std::function<void(size_t, size_t)>& fn, size_t n, size_t grain) {
  if (index >= participants_) return;
  if (grain == 0) {
    auto [begin, end] = share(n, participants_, index);
    if (begin < end) fn(begin, end);
    return;
  }
  for (size_t begin; (begin = next_.fetch_add(grain, std::memory_order_relaxed)) < n;)
    fn(begin, std::min(n, begin + grain));
}

void ComputePool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain,
                               size_t max_threads) {
  if (n == 0) return;
  jobs_.fetch_add(1, std::memory_order_relaxed);
  if (workers_.empty() || n == 1 || (grain != 0 && grain >= n) || max_threads == 1) {
    if (grain == 0) return fn(0, n);
    for (size_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
    return;
  }
  std::lock_guard call(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    n_ = n;
    grain_ = grain;
    participants_ = max_threads == 0 ? threads() : std::min(max_threads, threads());
    next_.store(0, std::memory_order_relaxed);
    pending_.store(workers_.size(), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work(0, fn, n, grain);
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  std::lock_guard lock(mutex_);
  job_ = nullptr;
}

void ComputePool::run(size_t index) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(size_t, size_t)>* job;
    size_t n, grain;
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
      n = n_;
      grain = grain_;
    }
    work(index, *job, n, grain);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);  // the caller may be between its check and its wait
      done_.notify_one();
    }
  }
}

namespace {
thread_local ComputePool* current_pool = nullptr;
thread_local const ComputePool* pinned_for = nullptr;  // the pool whose cores this thread is pinned to
}  // namespace

ComputePool& compute_pool() { return current_pool != nullptr ? *current_pool : process_compute_pool(); }
bool compute_pool_chosen() { return current_pool != nullptr; }

UseComputePool::UseComputePool(ComputePool* pool) : previous_(current_pool) {
  if (pool == nullptr) return;
  current_pool = pool;
  if (!pool->cores().empty() && pinned_for != pool && pin_thread(pool->cores())) pinned_for = pool;
}

UseComputePool::~UseComputePool() { current_pool = previous_; }

std::vector<int> thread_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

bool pin_thread(const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cores.empty()) {
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()) && c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
  } else {
    for (int c : cores)
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

namespace {
std::atomic<size_t> requested_threads{0};  // set_process_compute_threads
std::atomic<bool> process_pool_made{false};
}  // namespace

bool set_process_compute_threads(size_t threads) {
  if (process_pool_made.load()) return false;
  requested_threads.store(threads);
  return true;
}

ComputePool& process_compute_pool() {
  static ComputePool pool([] {
    process_pool_made.store(true);
    if (size_t n = requested_threads.load()) return n;
    if (const char* env = std::getenv("TOKENHOST_THREADS")) {
      long n = std::strtol(env, nullptr, 10);
      if (n > 0) return size_t(n);
    }
    return size_t(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace tokenhost
