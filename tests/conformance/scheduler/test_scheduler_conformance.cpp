// Every scheduler plugin against the same simulated engine: on random workloads each finishes every
// request (no starvation, no livelock, no stall) within a bound of steps, and continuous batching
// finishes spread-out arrivals in fewer steps than fixed batches.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sched_harness.hpp"

namespace scheduler_conformance_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

const std::vector<std::string> kSchedulers = {"scheduler.fifo", "scheduler.continuous", "scheduler.static"};

}  // namespace

TEST_CASE("every scheduler finishes every request of random workloads", "[scheduler][conformance]") {
  auto rng = fresh_rng("scheduler conformance simulation");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  for (int round = 0; round < 10; ++round) {
    SimConfig cfg = random_sim_config(rng, 300, 1000);
    const auto requests = random_requests(rng, u(1, 40), u(0, 5), cfg, u(0, 1) == 1);
    cfg.step_bound = sim_step_bound(requests);
    for (const std::string& id : kSchedulers) {
      INFO(id << " round " << round << " block_size " << cfg.block_size << " blocks " << cfg.total_blocks
              << " max_tokens " << cfg.max_step_tokens << " max_seqs " << cfg.max_step_seqs << " chunk "
              << cfg.max_chunk << " requests " << requests.size());
      Scheduler sched(id, toml::table{{"max_prefill_chunk", int64_t(cfg.max_chunk)}});
      const SimResult r = simulate(sched, requests, cfg);
      CHECK(r.failed.empty());
      CHECK(r.finished_at.size() == requests.size());
    }
  }
}

TEST_CASE("continuous batching finishes spread-out arrivals in fewer steps than static batches", "[scheduler][conformance]") {
  auto rng = fresh_rng("scheduler conformance continuous vs static");
  for (int round = 0; round < 4; ++round) {
    SimConfig cfg;
    cfg.block_size = 16;
    cfg.total_blocks = 256;  // room for every batch: the difference is the scheduling alone
    cfg.max_step_tokens = 512;
    cfg.max_step_seqs = 16;
    cfg.max_chunk = 256;
    const auto requests = random_requests(rng, 40, 4, cfg, false);
    cfg.step_bound = sim_step_bound(requests);
    Scheduler continuous("scheduler.continuous", toml::table{});
    Scheduler fixed("scheduler.static", toml::table{{"batch_size", int64_t(8)}});
    const SimResult c = simulate(continuous, requests, cfg);
    const SimResult s = simulate(fixed, requests, cfg);
    REQUIRE(c.finished_at.size() == requests.size());
    REQUIRE(s.finished_at.size() == requests.size());
    // Total latency: the sum over requests of finish step minus arrival step.
    uint64_t latency_c = 0, latency_s = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      latency_c += c.finished_at.at(i) - requests[i].arrival_step;
      latency_s += s.finished_at.at(i) - requests[i].arrival_step;
    }
    INFO("round " << round << ": continuous ends at step " << c.clock << " (" << c.steps << " steps, latency "
                  << latency_c << "), static at " << s.clock << " (" << s.steps << " steps, latency " << latency_s << ")");
    CHECK(c.clock < s.clock);
    CHECK(c.steps < s.steps);
    CHECK(latency_c < latency_s);
  }
}

}  // namespace scheduler_conformance_tests
