// Compute partitions: pools of their own run side by side (a job on one finishes while a job on the
// other is still running, which one shared pool's turns would forbid); a thread's compute_pool() is
// the one UseComputePool set, nested and restored; a pool with cores pins its workers and the thread
// that uses it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/compute_pool.hpp"

namespace base_compute_partitions_tests {

using namespace tokenhost;

namespace {

// Waits up to 10 s for flag; whether it was set.
bool wait_for(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!flag.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return flag.load();
}

}  // namespace

TEST_CASE("compute partitions: two pools run their jobs side by side", "[compute_pool]") {
  ComputePool a(2), b(2);
  std::atomic<bool> a_running{false}, b_done{false};
  std::atomic<bool> a_saw_b{false};
  // A's job runs until B's job, started only once A's is under way, has finished: with one pool the
  // second caller would wait for the first (calls take turns) and A would give up after 10 s.
  std::thread on_a([&] {
    a.parallel_for(2, [&](size_t begin, size_t) {
      if (begin != 0) return;
      a_running = true;
      a_saw_b = wait_for(b_done);
    });
  });
  REQUIRE(wait_for(a_running));
  std::atomic<size_t> b_sum{0};
  b.parallel_for(100, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) b_sum += i;
  });
  const uint64_t b_jobs = b.jobs();
  b_done = true;
  on_a.join();
  REQUIRE(a_saw_b);
  REQUIRE(b_sum == 4950);
  REQUIRE(b_jobs == 1);
  REQUIRE(a.jobs() == 1);
}

TEST_CASE("compute partitions: UseComputePool makes a pool the thread's, nests and restores", "[compute_pool]") {
  ComputePool outer(1), inner(1);
  ComputePool* const process = &process_compute_pool();
  REQUIRE(&compute_pool() == process);
  {
    UseComputePool use(&outer);
    REQUIRE(&compute_pool() == &outer);
    {
      UseComputePool nested(&inner);
      REQUIRE(&compute_pool() == &inner);
      UseComputePool none(nullptr);  // leaves the thread's pool as it is
      REQUIRE(&compute_pool() == &inner);
    }
    REQUIRE(&compute_pool() == &outer);
    // Another thread is not affected.
    ComputePool* seen = nullptr;
    std::thread([&] { seen = &compute_pool(); }).join();
    REQUIRE(seen == process);
  }
  REQUIRE(&compute_pool() == process);
}

TEST_CASE("compute partitions: a pool with cores pins its workers and the thread that uses it", "[compute_pool]") {
  const std::vector<int> all = thread_cores();
  REQUIRE(!all.empty());  // Linux reports every thread's affinity
  const int core = all.back();
  ComputePool pinned(3, {core});
  REQUIRE(pinned.cores() == std::vector<int>{core});
  std::vector<std::vector<int>> seen(3);
  std::thread user([&] {
    UseComputePool use(&pinned);
    compute_pool().parallel_for(3, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) seen[i] = thread_cores();
    });
  });
  user.join();
  for (const auto& cores : seen) REQUIRE(cores == std::vector<int>{core});
  // The test's own thread was not pinned by any of it.
  REQUIRE(thread_cores() == all);
}

}  // namespace base_compute_partitions_tests
