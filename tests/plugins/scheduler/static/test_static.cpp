// scheduler.static: invariants of the decision on many random states, fixed cases for batch
// admission, reservations and a too-large sequence, and a simulation in which every request finishes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "sched_harness.hpp"

namespace scheduler_static_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

Scheduler static_sched(int64_t batch_size, int64_t max_chunk) {
  return Scheduler("scheduler.static", toml::table{{"batch_size", batch_size}, {"max_prefill_chunk", max_chunk}});
}

// id, state, prompt_len, prefilled, kv_blocks, max_new_tokens; arrival = id.
th_sched_seq seq(uint64_t id, th_seq_state state, uint32_t prompt_len, uint32_t prefilled, uint32_t kv_blocks,
                 uint32_t max_new = 8) {
  return th_sched_seq{id, state, 0, id, prompt_len, prefilled,
                      state == TH_SEQ_RUNNING && prefilled >= prompt_len ? 1u : 0u, max_new, kv_blocks};
}

std::vector<uint64_t> ids(const std::vector<th_sched_item>& run) {
  std::vector<uint64_t> out;
  for (const auto& item : run) out.push_back(item.seq_id);
  return out;
}

// What static adds: with a sequence running, it admits none; with none running, it admits the first
// waiting/preempted sequences in arrival order, at most batch_size, reserving their whole need.
void check_static(const th_sched_state& st, uint32_t batch_size, uint32_t max_chunk, const SchedDecision& d) {
  check_sched_decision(st, max_chunk, d);
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < st.n_seqs; ++i) index[st.seqs[i].seq_id] = i;
  const bool any_running = std::any_of(st.seqs, st.seqs + st.n_seqs, [](const auto& s) { return s.state == TH_SEQ_RUNNING; });
  std::vector<size_t> admitted;
  for (const auto& item : d.run) {
    if (st.seqs[index[item.seq_id]].state != TH_SEQ_RUNNING) admitted.push_back(index[item.seq_id]);
  }
  std::sort(admitted.begin(), admitted.end());
  if (any_running) {
    REQUIRE(admitted.empty());
    return;
  }
  REQUIRE(d.preempt.empty());
  REQUIRE(admitted.size() <= batch_size);
  for (size_t k = 0; k < admitted.size(); ++k) REQUIRE(admitted[k] == k);  // the first, in arrival order
  if (admitted.size() > 1) {
    uint64_t reserved = 0;
    for (size_t i : admitted) {
      const auto& s = st.seqs[i];
      reserved += sched_div_up(uint64_t(s.prompt_len) + s.max_new_tokens - s.generated, st.block_size);
    }
    REQUIRE(reserved <= st.free_kv_blocks);
  }
}

}  // namespace

TEST_CASE("scheduler.static decisions keep every invariant on random states", "[scheduler][static]") {
  auto rng = fresh_rng("scheduler.static random states");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  int batches = 0, batch_steps = 0;
  for (int inst = 0; inst < 12; ++inst) {
    const uint32_t max_chunk = inst % 3 == 0 ? 65536 : u(1, 64);
    const uint32_t batch_size = u(1, 12);
    Scheduler sched = static_sched(batch_size, max_chunk);
    for (int trial = 0; trial < 150; ++trial) {
      const uint32_t bs = std::vector<uint32_t>{1, 4, 16}[u(0, 2)];
      std::vector<th_sched_seq> seqs = random_sched_seqs(rng, bs, false);
      if (u(0, 1)) {  // half the states with nothing running: batch admission
        for (auto& s : seqs) {
          if (s.state == TH_SEQ_RUNNING) s = th_sched_seq{s.seq_id, TH_SEQ_WAITING, 0, s.arrival_ns, s.prompt_len, 0, 0, s.max_new_tokens, 0};
        }
      }
      const th_sched_state st = sched_state(seqs, u(0, 1) ? u(0, 8) : u(0, 200), bs, u(1, 512), u(1, 24));
      INFO("instance " << inst << " batch_size " << batch_size << " max_prefill_chunk " << max_chunk << " trial "
                       << trial << " block_size " << bs << " free " << st.free_kv_blocks << " max_tokens "
                       << st.max_step_tokens << " max_seqs " << st.max_step_seqs);
      const SchedDecision d = sched.schedule(st);
      check_static(st, batch_size, max_chunk, d);
      const bool any_running = std::any_of(seqs.begin(), seqs.end(), [](const auto& s) { return s.state == TH_SEQ_RUNNING; });
      (any_running ? batch_steps : batches) += !d.run.empty();
    }
  }
  INFO("batches admitted " << batches << ", batch steps " << batch_steps);
  CHECK(batches > 0);
  CHECK(batch_steps > 0);
}

TEST_CASE("scheduler.static admits a batch only when nothing runs", "[scheduler][static]") {
  Scheduler sched = static_sched(2, 256);
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_WAITING, 4, 0, 0), seq(2, TH_SEQ_PREEMPTED, 4, 0, 0),
                                    seq(3, TH_SEQ_WAITING, 4, 0, 0)};
  SchedDecision d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  CHECK(ids(d.run) == std::vector<uint64_t>{1, 2});  // batch_size 2, arrival order
  CHECK(d.run[0].n_tokens == 4);
  // Mid-batch (seq 1 decodes, seq 2 prefills), nothing is admitted, however much room there is.
  seqs[0] = seq(1, TH_SEQ_RUNNING, 4, 4, 1);
  seqs[1] = seq(2, TH_SEQ_RUNNING, 8, 4, 1);
  d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  CHECK(ids(d.run) == std::vector<uint64_t>{1, 2});
  CHECK(d.run[1].n_tokens == 4);
  // Seq 2 has finished: seq 1 runs on alone, seq 3 still waits.
  seqs.erase(seqs.begin() + 1);
  d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  CHECK(ids(d.run) == std::vector<uint64_t>{1});
  // Once the batch is done, the next one starts.
  seqs.erase(seqs.begin());
  d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  CHECK(ids(d.run) == std::vector<uint64_t>{3});
}

TEST_CASE("scheduler.static reserves blocks for prompt and max_new_tokens", "[scheduler][static]") {
  Scheduler sched = static_sched(8, 256);
  // Block size 4: seq 1 reserves (8 + 8) / 4 = 4 blocks, seq 2 (4 + 4) / 4 = 2, seq 3 (1 + 1) / 4 = 1.
  const std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_WAITING, 8, 0, 0, 8), seq(2, TH_SEQ_WAITING, 4, 0, 0, 4),
                                          seq(3, TH_SEQ_WAITING, 1, 0, 0, 1)};
  CHECK(ids(sched.schedule(sched_state(seqs, 5, 4, 512, 8)).run) == std::vector<uint64_t>{1});  // no overtaking by 3
  CHECK(ids(sched.schedule(sched_state(seqs, 6, 4, 512, 8)).run) == std::vector<uint64_t>{1, 2});
  CHECK(ids(sched.schedule(sched_state(seqs, 7, 4, 512, 8)).run) == std::vector<uint64_t>{1, 2, 3});
  // A budget of 5 tokens for 3 members: each keeps one token for those after it.
  const SchedDecision d = sched.schedule(sched_state(seqs, 7, 4, 5, 8));
  REQUIRE(d.run.size() == 3);
  CHECK(d.run[0].n_tokens == 3);
  CHECK(d.run[1].n_tokens == 1);
  CHECK(d.run[2].n_tokens == 1);
}

TEST_CASE("scheduler.static runs a too-large sequence alone and lets the engine fail it", "[scheduler][static]") {
  Scheduler sched = static_sched(8, 256);
  // Seq 1 reserves (8 + 100) / 4 = 27 blocks of 10: it runs alone, its prompt fits.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_WAITING, 8, 0, 0, 100), seq(2, TH_SEQ_WAITING, 4, 0, 0, 4)};
  SchedDecision d = sched.schedule(sched_state(seqs, 10, 4, 512, 8));
  REQUIRE(ids(d.run) == std::vector<uint64_t>{1});
  CHECK(d.run[0].n_tokens == 8);
  // It has grown to the whole pool and needs an 11th block: it preempts itself and nothing runs, so
  // the engine fails its oldest request, which is this sequence.
  seqs[0] = th_sched_seq{1, TH_SEQ_RUNNING, 0, 1, 40, 40, 33, 100, 10};
  d = sched.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.run.empty());
  CHECK(d.preempt == std::vector<uint64_t>{1});
  // A prompt larger than the whole pool is not admitted at all: the engine fails it at once.
  seqs[0] = seq(1, TH_SEQ_WAITING, 60, 0, 0, 4);
  d = sched.schedule(sched_state(seqs, 10, 4, 512, 8));
  CHECK(d.run.empty());
  CHECK(d.preempt.empty());
}

TEST_CASE("scheduler.static finishes every request of random workloads", "[scheduler][static]") {
  auto rng = fresh_rng("scheduler.static simulation");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  for (int round = 0; round < 16; ++round) {
    SimConfig cfg = random_sim_config(rng, 400, 1200);
    const uint32_t batch_size = u(1, 10);
    Scheduler sched = static_sched(batch_size, cfg.max_chunk);
    auto requests = random_requests(rng, u(1, 40), u(0, 6), cfg, false);
    cfg.step_bound = sim_step_bound(requests);
    INFO("round " << round << " block_size " << cfg.block_size << " blocks " << cfg.total_blocks << " max_tokens "
                  << cfg.max_step_tokens << " max_seqs " << cfg.max_step_seqs << " chunk " << cfg.max_chunk
                  << " batch_size " << batch_size << " requests " << requests.size());
    const SimResult r = simulate(sched, requests, cfg);
    CHECK(r.failed.empty());
    CHECK(r.finished_at.size() == requests.size());
    CHECK(r.preemptions == 0);  // reservations: a batch never preempts
  }
}

TEST_CASE("scheduler.static fails only the requests that outgrow the pool", "[scheduler][static]") {
  auto rng = fresh_rng("scheduler.static oversize");
  SimConfig cfg;
  cfg.block_size = 4;
  cfg.total_blocks = 32;  // 128 positions
  auto requests = random_requests(rng, 12, 3, cfg, false);
  requests.insert(requests.begin() + 3, SimRequest{requests[3].arrival_step, 0, 100, 60});  // 160 positions
  requests.insert(requests.begin() + 6, SimRequest{requests[6].arrival_step, 0, 200, 4});   // prompt > pool
  cfg.step_bound = sim_step_bound(requests);
  Scheduler sched = static_sched(4, 256);
  const SimResult r = simulate(sched, requests, cfg);
  CHECK(r.failed == std::vector<uint64_t>{3, 6});
  CHECK(r.finished_at.size() == requests.size() - 2);
}

}  // namespace scheduler_static_tests
