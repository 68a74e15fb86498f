// scheduler.fifo: invariants of the decision on many random states, and fixed cases for FIFO order,
// chunked prefill and preemption of the latest arrival.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sched_harness.hpp"

namespace scheduler_fifo_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// scheduler.fifo with its max_prefill_chunk.
Scheduler fifo_scheduler(int64_t max_chunk) { return Scheduler("scheduler.fifo", toml::table{{"max_prefill_chunk", max_chunk}}); }

th_sched_seq seq(uint64_t id, th_seq_state state, uint32_t prompt_len, uint32_t prefilled, uint32_t kv_blocks) {
  return th_sched_seq{id, state, 0, id * 10, prompt_len, prefilled, prefilled >= prompt_len ? 3u : 0u, 64, kv_blocks};
}

// The invariants of every scheduler (sched_harness.hpp), then FIFO's own: preempted sequences arrived
// after every running sequence that runs; no admission in a step that preempts; admitted sequences
// are the first waiting/preempted ones, in order (no overtaking).
void check_decision(const th_sched_state& st, uint32_t max_chunk, const SchedDecision& d) {
  check_sched_decision(st, max_chunk, d);
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < st.n_seqs; ++i) index[st.seqs[i].seq_id] = i;
  int64_t last_running_run = -1, first_preempted = int64_t(st.n_seqs);
  std::vector<size_t> admitted;  // indices of waiting/preempted sequences that run
  for (const th_sched_item& item : d.run) {
    const size_t i = index[item.seq_id];
    if (st.seqs[i].state == TH_SEQ_RUNNING) last_running_run = std::max<int64_t>(last_running_run, int64_t(i));
    else admitted.push_back(i);
  }
  for (uint64_t id : d.preempt) first_preempted = std::min<int64_t>(first_preempted, int64_t(index[id]));
  REQUIRE(last_running_run < first_preempted);
  if (!d.preempt.empty()) REQUIRE(admitted.empty());
  std::vector<size_t> queue;
  for (size_t i = 0; i < st.n_seqs; ++i) {
    if (st.seqs[i].state != TH_SEQ_RUNNING) queue.push_back(i);
  }
  REQUIRE(admitted.size() <= queue.size());
  REQUIRE(std::equal(admitted.begin(), admitted.end(), queue.begin()));
}

}  // namespace

TEST_CASE("scheduler.fifo decisions keep every invariant on random states", "[scheduler][fifo]") {
  auto rng = fresh_rng("scheduler.fifo random states");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  int preempting = 0, admitting = 0, chunked = 0;
  for (int inst = 0; inst < 12; ++inst) {
    const uint32_t max_chunk = inst % 3 == 0 ? 65536 : u(1, 64);
    Scheduler fifo = fifo_scheduler(max_chunk);
    for (int trial = 0; trial < 150; ++trial) {
      const uint32_t bs = std::vector<uint32_t>{1, 4, 16}[u(0, 2)];
      std::vector<th_sched_seq> seqs;
      const uint32_t n = u(1, 20);
      for (uint32_t i = 0; i < n; ++i) {
        const th_seq_state state = th_seq_state(u(0, 2));
        const uint32_t prompt = u(1, 200);
        if (state == TH_SEQ_RUNNING) {
          const uint32_t prefilled = u(0, 1) ? prompt : u(1, prompt);
          const uint32_t generated = prefilled == prompt ? u(1, 20) : 0;
          const uint32_t blocks = uint32_t(sched_div_up(prefilled + generated, bs)) + u(0, 1);
          seqs.push_back(th_sched_seq{1000 + i, state, 0, i, prompt, prefilled, generated, 64, blocks});
        } else {
          seqs.push_back(th_sched_seq{1000 + i, state, 0, i, prompt, 0, 0, 64, 0});
        }
      }
      const th_sched_state st = sched_state(seqs, u(0, 1) ? u(0, 4) : u(0, 100), bs, u(1, 512), u(1, 24));
      INFO("instance " << inst << " max_prefill_chunk " << max_chunk << " trial " << trial << " block_size " << bs
                       << " free " << st.free_kv_blocks << " max_tokens " << st.max_step_tokens << " max_seqs "
                       << st.max_step_seqs);
      const SchedDecision d = fifo.schedule(st);
      check_decision(st, max_chunk, d);
      preempting += !d.preempt.empty();
      for (const auto& item : d.run) {
        const auto& s = *std::find_if(seqs.begin(), seqs.end(), [&](const auto& x) { return x.seq_id == item.seq_id; });
        admitting += s.state != TH_SEQ_RUNNING;
        chunked += s.prefilled < s.prompt_len && item.n_tokens < s.prompt_len - s.prefilled;
      }
    }
  }
  INFO("states with preemption " << preempting << ", admissions " << admitting << ", partial chunks " << chunked);
  CHECK(preempting > 0);
  CHECK(admitting > 0);
  CHECK(chunked > 0);
}

TEST_CASE("scheduler.fifo serves in arrival order without overtaking", "[scheduler][fifo]") {
  Scheduler fifo = fifo_scheduler(256);
  // A decodes; B (arrived before C) needs 10 blocks, only 3 are free: neither B nor C may run.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 8, 8, 3), seq(2, TH_SEQ_WAITING, 40, 0, 0),
                                    seq(3, TH_SEQ_WAITING, 4, 0, 0)};
  SchedDecision d = fifo.schedule(sched_state(seqs, 3, 4, 512, 8));
  REQUIRE(d.run.size() == 1);
  CHECK(d.run[0].seq_id == 1);
  CHECK(d.run[0].n_tokens == 1);
  CHECK(d.preempt.empty());
  // With room, both are admitted, B before C, after the running A.
  d = fifo.schedule(sched_state(seqs, 20, 4, 512, 8));
  REQUIRE(d.run.size() == 3);
  CHECK(d.run[0].seq_id == 1);
  CHECK(d.run[1].seq_id == 2);
  CHECK(d.run[1].n_tokens == 40);
  CHECK(d.run[2].seq_id == 3);
  CHECK(d.run[2].n_tokens == 4);
  // A sequence slot limit of 2 admits B only, never C ahead of B.
  d = fifo.schedule(sched_state(seqs, 20, 4, 512, 2));
  REQUIRE(d.run.size() == 2);
  CHECK(d.run[1].seq_id == 2);
}

TEST_CASE("scheduler.fifo chunks prefill by max_prefill_chunk and the token budget", "[scheduler][fifo]") {
  Scheduler fifo = fifo_scheduler(8);
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 20, 16, 4), seq(2, TH_SEQ_WAITING, 20, 0, 0),
                                    seq(3, TH_SEQ_PREEMPTED, 30, 0, 0)};
  SchedDecision d = fifo.schedule(sched_state(seqs, 100, 4, 512, 8));
  REQUIRE(d.run.size() == 3);
  CHECK(d.run[0].n_tokens == 4);  // the rest of seq 1's prompt
  CHECK(d.run[1].n_tokens == 8);  // a chunk of max_prefill_chunk
  CHECK(d.run[2].n_tokens == 8);
  // A budget of 10 tokens: 4 + 6, and nothing for seq 3.
  d = fifo.schedule(sched_state(seqs, 100, 4, 10, 8));
  REQUIRE(d.run.size() == 2);
  CHECK(d.run[0].n_tokens == 4);
  CHECK(d.run[1].seq_id == 2);
  CHECK(d.run[1].n_tokens == 6);
}

TEST_CASE("scheduler.fifo preempts the latest arrival when blocks run out", "[scheduler][fifo]") {
  Scheduler fifo = fifo_scheduler(256);
  // A, B, C decode at a block boundary (each needs one more block), none free; D waits.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 8, 8, 2), seq(2, TH_SEQ_RUNNING, 8, 8, 2),
                                    seq(3, TH_SEQ_RUNNING, 8, 8, 2), seq(4, TH_SEQ_WAITING, 2, 0, 0)};
  SchedDecision d = fifo.schedule(sched_state(seqs, 0, 4, 512, 8));
  REQUIRE(d.preempt == std::vector<uint64_t>{3});
  REQUIRE(d.run.size() == 2);
  CHECK(d.run[0].seq_id == 1);
  CHECK(d.run[1].seq_id == 2);
  // C's 2 blocks serve A and B; D is not admitted in a step that preempted.
  // With C holding only 1 block, B cannot run either: B is then the latest undecided running
  // sequence and preempts itself; A runs.
  seqs[2].kv_blocks = 1;
  d = fifo.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{3, 2});
  REQUIRE(d.run.size() == 1);
  CHECK(d.run[0].seq_id == 1);
  // Alone and out of blocks, a running sequence preempts itself.
  const std::vector<th_sched_seq> alone = {seq(1, TH_SEQ_RUNNING, 8, 8, 2)};
  d = fifo.schedule(sched_state(alone, 0, 4, 512, 8));
  CHECK(d.run.empty());
  CHECK(d.preempt == std::vector<uint64_t>{1});
}

}  // namespace scheduler_fifo_tests
