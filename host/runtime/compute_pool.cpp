#include "runtime/compute_pool.hpp"

#include <algorithm>
#include <cstdlib>

namespace tokenhost {

ComputePool::ComputePool(size_t threads) {
  for (size_t i = 1; i < std::max<size_t>(threads, 1); ++i) workers_.emplace_back([this, i] { run(i); });
}

ComputePool::~ComputePool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
std::pair<size_t, size_t> share(size_t n, size_t parts, size_t index) {
  size_t per = n / parts, extra = n % parts;
  size_t begin = index * per + std::min(index, extra);
  return {begin, begin + per + (index < extra ? 1 : 0)};
}
}  // namespace

void ComputePool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard call(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    n_ = n;
    pending_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  auto [begin, end] = share(n, threads(), 0);
  if (begin < end) fn(begin, end);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void ComputePool::run(size_t index) {
  size_t seen = 0;
  while (true) {
    const std::function<void(size_t, size_t)>* job;
    size_t n;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
    }
    auto [begin, end] = share(n, threads(), index);
    if (begin < end) (*job)(begin, end);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

ComputePool& compute_pool() {
  static ComputePool pool([] {
    if (const char* env = std::getenv("TOKENHOST_THREADS")) {
      long n = std::strtol(env, nullptr, 10);
      if (n > 0) return size_t(n);
    }
    return size_t(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace tokenhost
