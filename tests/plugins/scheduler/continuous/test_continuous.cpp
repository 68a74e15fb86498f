// scheduler.continuous: invariants of the decision on many random states, fixed cases for priority
// then arrival order, decodes mixed with prefill chunks, preemption of the lowest priority and latest
// arrival, and a simulation with random arrivals in which every request finishes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "sched_harness.hpp"

namespace scheduler_continuous_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

Scheduler continuous(int64_t max_chunk, bool preempt_for_priority = true) {
  return Scheduler("scheduler.continuous",
                   toml::table{{"max_prefill_chunk", max_chunk}, {"preempt_for_priority", preempt_for_priority}});
}

// id, state, priority, arrival, prompt_len, prefilled, kv_blocks; a decoding sequence has generated 3.
th_sched_seq seq(uint64_t id, th_seq_state state, int32_t priority, uint64_t arrival, uint32_t prompt_len,
                 uint32_t prefilled, uint32_t kv_blocks) {
  return th_sched_seq{id, state, priority, arrival, prompt_len, prefilled,
                      state == TH_SEQ_RUNNING && prefilled >= prompt_len ? 3u : 0u, 64, kv_blocks};
}

std::vector<uint64_t> ids(const std::vector<th_sched_item>& run) {
  std::vector<uint64_t> out;
  for (const auto& item : run) out.push_back(item.seq_id);
  return out;
}

bool never_fits(const th_sched_state& st, const th_sched_seq& s) {
  return sched_div_up(uint64_t(s.prompt_len) + (s.generated > 0 ? 1 : 0), st.block_size) > st.total_kv_blocks;
}

// The rank of the plugin: priority high to low, then running, preempted, waiting, then arrival.
std::vector<size_t> rank_order(const th_sched_state& st) {
  std::vector<size_t> order(st.n_seqs);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto cls = [](th_seq_state s) { return s == TH_SEQ_RUNNING ? 0 : s == TH_SEQ_PREEMPTED ? 1 : 2; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = st.seqs[a], &y = st.seqs[b];
    if (x.priority != y.priority) return x.priority > y.priority;
    if (cls(x.state) != cls(y.state)) return cls(x.state) < cls(y.state);
    return x.arrival_ns < y.arrival_ns;
  });
  return order;
}

// What continuous adds to the common invariants: decodes precede prefill chunks in the run list;
// admissions are the first of the queue in rank order (never-fitting ones aside); and every running
// sequence that runs ranks above every sequence preempted for blocks.
void check_continuous(const th_sched_state& st, uint32_t max_chunk, const SchedDecision& d) {
  check_sched_decision(st, max_chunk, d);
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < st.n_seqs; ++i) index[st.seqs[i].seq_id] = i;
  bool seen_prefill = false;
  for (const auto& item : d.run) {
    const auto& s = st.seqs[index[item.seq_id]];
    const bool decode = s.prefilled >= s.prompt_len;
    REQUIRE(!(decode && seen_prefill));
    seen_prefill = seen_prefill || !decode;
  }
  const std::vector<size_t> order = rank_order(st);
  std::vector<size_t> rank(st.n_seqs);
  for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
  std::vector<size_t> queue, admitted;
  for (size_t i : order) {
    if (st.seqs[i].state != TH_SEQ_RUNNING && !never_fits(st, st.seqs[i])) queue.push_back(i);
  }
  for (size_t i : order) {
    const bool runs = std::any_of(d.run.begin(), d.run.end(), [&](const auto& it) { return it.seq_id == st.seqs[i].seq_id; });
    if (runs && st.seqs[i].state != TH_SEQ_RUNNING) admitted.push_back(i);
  }
  REQUIRE(admitted.size() <= queue.size());
  REQUIRE(std::equal(admitted.begin(), admitted.end(), queue.begin()));
  int64_t last_running_run = -1, first_preempted = int64_t(st.n_seqs);
  for (const auto& item : d.run) {
    const size_t i = index[item.seq_id];
    if (st.seqs[i].state == TH_SEQ_RUNNING) last_running_run = std::max<int64_t>(last_running_run, int64_t(rank[i]));
  }
  for (uint64_t id : d.preempt) {
    const size_t i = index[id];
    if (!never_fits(st, st.seqs[i])) first_preempted = std::min<int64_t>(first_preempted, int64_t(rank[i]));
  }
  REQUIRE(last_running_run < first_preempted);
}

}  // namespace

TEST_CASE("scheduler.continuous decisions keep every invariant on random states", "[scheduler][continuous]") {
  auto rng = fresh_rng("scheduler.continuous random states");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  int preempting = 0, admitting = 0, chunked = 0, mixed = 0;
  for (int inst = 0; inst < 12; ++inst) {
    const uint32_t max_chunk = inst % 3 == 0 ? 65536 : u(1, 64);
    const bool for_priority = inst % 2 == 0;
    Scheduler sched = continuous(max_chunk, for_priority);
    for (int trial = 0; trial < 150; ++trial) {
      const uint32_t bs = std::vector<uint32_t>{1, 4, 16}[u(0, 2)];
      const std::vector<th_sched_seq> seqs = random_sched_seqs(rng, bs, true);
      const th_sched_state st = sched_state(seqs, u(0, 1) ? u(0, 4) : u(0, 100), bs, u(1, 512), u(1, 24));
      INFO("instance " << inst << " max_prefill_chunk " << max_chunk << " preempt_for_priority " << for_priority
                       << " trial " << trial << " block_size " << bs << " free " << st.free_kv_blocks << " max_tokens "
                       << st.max_step_tokens << " max_seqs " << st.max_step_seqs);
      const SchedDecision d = sched.schedule(st);
      check_continuous(st, max_chunk, d);
      preempting += !d.preempt.empty();
      bool decode = false, prefill = false;
      for (const auto& item : d.run) {
        const auto& s = *std::find_if(seqs.begin(), seqs.end(), [&](const auto& x) { return x.seq_id == item.seq_id; });
        admitting += s.state != TH_SEQ_RUNNING;
        chunked += s.prefilled < s.prompt_len && item.n_tokens < s.prompt_len - s.prefilled;
        (s.prefilled >= s.prompt_len ? decode : prefill) = true;
      }
      mixed += decode && prefill;
    }
  }
  INFO("preemptions " << preempting << ", admissions " << admitting << ", partial chunks " << chunked << ", mixed "
                      << mixed);
  CHECK(preempting > 0);
  CHECK(admitting > 0);
  CHECK(chunked > 0);
  CHECK(mixed > 0);
}

TEST_CASE("scheduler.continuous admits by priority, then arrival, without overtaking", "[scheduler][continuous]") {
  Scheduler sched = continuous(256);
  // W1 (p0), W2 (p2), W3 (p2), W4 (p1), all waiting with 4-token prompts (1 block each).
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_WAITING, 0, 1, 4, 0, 0), seq(2, TH_SEQ_WAITING, 2, 2, 4, 0, 0),
                                    seq(3, TH_SEQ_WAITING, 2, 3, 4, 0, 0), seq(4, TH_SEQ_WAITING, 1, 4, 4, 0, 0)};
  SchedDecision d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  CHECK(ids(d.run) == std::vector<uint64_t>{2, 3, 4, 1});
  d = sched.schedule(sched_state(seqs, 100, 4, 512, 2));
  CHECK(ids(d.run) == std::vector<uint64_t>{2, 3});
  // W3 needs 10 blocks of a pool of 20 (the rest held elsewhere). With 3 free, W2 takes 1 and W3
  // prefills an 8-token chunk in the other 2.
  seqs[2].prompt_len = 40;
  th_sched_state st = sched_state(seqs, 3, 4, 512, 8);
  st.total_kv_blocks = 20;
  d = sched.schedule(st);
  CHECK(ids(d.run) == std::vector<uint64_t>{2, 3});
  CHECK(d.run[1].n_tokens == 8);
  // With 1 free, W2 takes it; W3 waits, and neither W4 nor W1 overtakes it.
  st.free_kv_blocks = 1;
  d = sched.schedule(st);
  CHECK(ids(d.run) == std::vector<uint64_t>{2});
  CHECK(d.preempt.empty());
}

TEST_CASE("scheduler.continuous mixes decodes and prefill chunks in one step, decodes first", "[scheduler][continuous]") {
  Scheduler sched = continuous(8);
  // R1 prefills (4 prompt tokens left), R2 decodes, W waits with 30 prompt tokens.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 0, 1, 20, 16, 4), seq(2, TH_SEQ_RUNNING, 0, 2, 8, 8, 3),
                                    seq(3, TH_SEQ_WAITING, 0, 3, 30, 0, 0)};
  SchedDecision d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  REQUIRE(d.run.size() == 3);
  CHECK(d.run[0].seq_id == 2);  // the decode first
  CHECK(d.run[0].n_tokens == 1);
  CHECK(d.run[1].seq_id == 1);
  CHECK(d.run[1].n_tokens == 4);
  CHECK(d.run[2].seq_id == 3);
  CHECK(d.run[2].n_tokens == 8);  // max_prefill_chunk
  // A budget of 6 tokens: the decode keeps its token, R1 its 4, W the 1 left.
  d = sched.schedule(sched_state(seqs, 100, 4, 6, 8));
  REQUIRE(d.run.size() == 3);
  CHECK(d.run[2].n_tokens == 1);
  // A higher-priority prefill does not take the token a lower-priority decode needs.
  seqs[0].priority = 5;
  d = sched.schedule(sched_state(seqs, 100, 4, 3, 8));
  REQUIRE(d.run.size() == 2);
  CHECK(d.run[0].seq_id == 2);
  CHECK(d.run[1].seq_id == 1);
  CHECK(d.run[1].n_tokens == 2);
}

TEST_CASE("scheduler.continuous caps a step's prefill tokens while sequences decode, when configured", "[scheduler][continuous]") {
  Scheduler sched("scheduler.continuous", toml::table{{"max_prefill_chunk", 64}, {"max_prefill_tokens_with_decodes", 10}});
  // R1 prefills (20 prompt tokens left), R2 decodes, W1 and W2 wait with 30 prompt tokens each.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 0, 1, 36, 16, 4), seq(2, TH_SEQ_RUNNING, 0, 2, 8, 8, 3),
                                    seq(3, TH_SEQ_WAITING, 0, 3, 30, 0, 0), seq(4, TH_SEQ_WAITING, 0, 4, 30, 0, 0)};
  SchedDecision d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  check_continuous(sched_state(seqs, 100, 4, 512, 8), 64, d);
  REQUIRE(d.run.size() == 2);
  CHECK(d.run[0].seq_id == 2);  // the decode
  CHECK(d.run[1].seq_id == 1);
  CHECK(d.run[1].n_tokens == 10);  // the cap, though its chunk and the budget allow 20
  // Split over two prefills: R1 takes 6 of its last 6, W1 the 4 left of the cap.
  seqs[0].prefilled = 30;
  seqs[0].kv_blocks = 8;
  d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  REQUIRE(d.run.size() == 3);
  CHECK(d.run[1].n_tokens == 6);
  CHECK(d.run[2].seq_id == 3);
  CHECK(d.run[2].n_tokens == 4);
  // Nothing decodes: no cap, each prefill takes its whole chunk.
  seqs[1].state = TH_SEQ_WAITING;
  seqs[1].prefilled = 0;
  seqs[1].kv_blocks = 0;
  seqs[1].generated = 0;
  seqs[0].prefilled = 16;
  seqs[0].kv_blocks = 4;
  d = sched.schedule(sched_state(seqs, 100, 4, 512, 8));
  uint32_t prefill = 0;
  for (const auto& item : d.run) prefill += item.n_tokens;
  CHECK(prefill == 20 + 8 + 30 + 30);
}

TEST_CASE("scheduler.continuous preempts the lowest priority, latest arrival", "[scheduler][continuous]") {
  Scheduler sched = continuous(256);
  // All decode at a block boundary (each needs one more block), none free. A (p1), B (p0), C (p0), D (p1).
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 1, 1, 8, 8, 2), seq(2, TH_SEQ_RUNNING, 0, 2, 8, 8, 2),
                                    seq(3, TH_SEQ_RUNNING, 0, 3, 8, 8, 2), seq(4, TH_SEQ_RUNNING, 1, 4, 8, 8, 2)};
  SchedDecision d = sched.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{3});  // C's 2 blocks serve A and D; B waits
  CHECK(ids(d.run) == std::vector<uint64_t>{1, 4});
  // With one free block as well, B gets it.
  d = sched.schedule(sched_state(seqs, 1, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{3});
  CHECK(ids(d.run) == std::vector<uint64_t>{1, 4, 2});
}

TEST_CASE("scheduler.continuous preempts for priority only when configured to", "[scheduler][continuous]") {
  // L (p0) decodes with room in its last block, H (p5) waits for 2 blocks; none free.
  const std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 0, 1, 6, 6, 2), seq(2, TH_SEQ_WAITING, 5, 2, 8, 0, 0)};
  Scheduler with = continuous(256, true);
  SchedDecision d = with.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{1});
  CHECK(ids(d.run) == std::vector<uint64_t>{2});
  CHECK(d.run[0].n_tokens == 8);
  Scheduler without = continuous(256, false);
  d = without.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt.empty());
  CHECK(ids(d.run) == std::vector<uint64_t>{1});
  // Equal priority never preempts a running sequence for a waiting one.
  std::vector<th_sched_seq> same = seqs;
  same[1].priority = 0;
  d = with.schedule(sched_state(same, 0, 4, 512, 8));
  CHECK(d.preempt.empty());
  CHECK(ids(d.run) == std::vector<uint64_t>{1});
  // Never a preemption for a sequence that then cannot fit: H (p5) needs 8 blocks for its prompt; A
  // (p9) and L (p0) decode with room, 4 blocks each, none free. Only L's 4 are H's to take: too few.
  std::vector<th_sched_seq> three = {seq(1, TH_SEQ_RUNNING, 9, 1, 14, 14, 4), seq(2, TH_SEQ_RUNNING, 0, 2, 14, 14, 4),
                                     seq(3, TH_SEQ_WAITING, 5, 3, 32, 0, 0)};
  d = with.schedule(sched_state(three, 0, 4, 512, 8));
  CHECK(d.preempt.empty());
  CHECK(ids(d.run) == std::vector<uint64_t>{1, 2});
  // With A at priority 0 as well, both make room, and H prefills all 32 tokens.
  three[0].priority = 0;
  d = with.schedule(sched_state(three, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{2, 1});
  REQUIRE(ids(d.run) == std::vector<uint64_t>{3});
  CHECK(d.run[0].n_tokens == 32);
}

TEST_CASE("scheduler.continuous resumes a preempted sequence before newer arrivals of its priority", "[scheduler][continuous]") {
  Scheduler sched = continuous(256);
  // P (preempted) ranks before the waiting W1 and W3 of its priority; one block is free.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_WAITING, 0, 1, 4, 0, 0), seq(2, TH_SEQ_PREEMPTED, 0, 2, 4, 0, 0),
                                    seq(3, TH_SEQ_WAITING, 0, 3, 4, 0, 0)};
  SchedDecision d = sched.schedule(sched_state(seqs, 1, 4, 512, 8));
  CHECK(ids(d.run) == std::vector<uint64_t>{2});
  // In a step that preempts B (same priority as W), W is not admitted with the blocks B leaves: A
  // (decoding at a block boundary) takes 1 of B's 3, and W would fit in the other 2.
  seqs = {seq(1, TH_SEQ_RUNNING, 0, 1, 8, 8, 2), seq(2, TH_SEQ_RUNNING, 0, 2, 12, 12, 3),
          seq(3, TH_SEQ_WAITING, 0, 3, 4, 0, 0)};
  seqs[1].prefilled = 9;  // B prefills: its 3 last tokens need no block, but it ranks below A
  seqs[1].prompt_len = 12;
  d = sched.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{2});
  CHECK(ids(d.run) == std::vector<uint64_t>{1});
  // A higher-priority arrival may use them.
  seqs[2].priority = 1;
  d = sched.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{2});
  CHECK(ids(d.run) == std::vector<uint64_t>{1, 3});
}

TEST_CASE("scheduler.continuous gives back what can never fit and always makes progress", "[scheduler][continuous]") {
  Scheduler sched = continuous(256);
  // A pool of 4 blocks of 4: R decodes at 16 positions and needs a 5th block; it can never fit.
  std::vector<th_sched_seq> seqs = {seq(1, TH_SEQ_RUNNING, 0, 1, 16, 16, 4), seq(2, TH_SEQ_WAITING, 0, 2, 40, 0, 0),
                                    seq(3, TH_SEQ_WAITING, 0, 3, 4, 0, 0)};
  SchedDecision d = sched.schedule(sched_state(seqs, 0, 4, 512, 8));
  CHECK(d.preempt == std::vector<uint64_t>{1});
  CHECK(ids(d.run) == std::vector<uint64_t>{3});  // the 40-token prompt never fits either: skipped
  // Budget of one token: the high-priority prefill T leaves it to the decode D, which cannot get a
  // block without preempting T (ranked above it). Rather than run nothing, T takes D's blocks.
  seqs = {seq(1, TH_SEQ_RUNNING, 5, 1, 12, 8, 2), seq(2, TH_SEQ_RUNNING, 0, 2, 8, 8, 2)};
  d = sched.schedule(sched_state(seqs, 0, 4, 1, 8));
  CHECK(d.preempt == std::vector<uint64_t>{2});
  REQUIRE(ids(d.run) == std::vector<uint64_t>{1});
  CHECK(d.run[0].n_tokens == 1);
}

TEST_CASE("scheduler.continuous finishes every request of random workloads", "[scheduler][continuous]") {
  auto rng = fresh_rng("scheduler.continuous simulation");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  uint64_t preemptions = 0;
  for (int round = 0; round < 16; ++round) {
    SimConfig cfg = random_sim_config(rng, 400, 1200);
    const bool for_priority = round % 2 == 0;
    Scheduler sched = continuous(cfg.max_chunk, for_priority);
    const auto requests = random_requests(rng, u(1, 40), u(0, 6), cfg, true);
    cfg.step_bound = sim_step_bound(requests);
    INFO("round " << round << " block_size " << cfg.block_size << " blocks " << cfg.total_blocks << " max_tokens "
                  << cfg.max_step_tokens << " max_seqs " << cfg.max_step_seqs << " chunk " << cfg.max_chunk
                  << " preempt_for_priority " << for_priority << " requests " << requests.size());
    const SimResult r = simulate(sched, requests, cfg);
    CHECK(r.failed.empty());
    CHECK(r.finished_at.size() == requests.size());
    preemptions += r.preemptions;
  }
  INFO("preemptions " << preemptions);
  CHECK(preemptions > 0);
}

TEST_CASE("scheduler.continuous serves a request that outgrows the pool until the engine fails it", "[scheduler][continuous]") {
  auto rng = fresh_rng("scheduler.continuous oversize");
  SimConfig cfg;
  cfg.block_size = 4;
  cfg.total_blocks = 32;  // 128 positions
  auto requests = random_requests(rng, 12, 3, cfg, true);
  requests.insert(requests.begin() + 3, SimRequest{requests[3].arrival_step, 1, 100, 60});  // 160 positions
  cfg.step_bound = sim_step_bound(requests);
  Scheduler sched = continuous(256);
  const SimResult r = simulate(sched, requests, cfg);
  CHECK(r.failed == std::vector<uint64_t>{3});
  CHECK(r.finished_at.size() == requests.size() - 1);
}

// ---- Fair share between clients (ABI 1.3: th_sched_state.seq_clients) ----

namespace {

Scheduler continuous_fair(bool fair_share) {
  return Scheduler("scheduler.continuous", toml::table{{"max_prefill_chunk", 256}, {"fair_share", fair_share}});
}

// Client 0 decodes 8 sequences (ids 1..8, 5 positions each in 2 blocks of 4: the next token fits);
// client 1's one request (id 9) waits with a 4-token prompt (1 block).
std::vector<th_sched_seq> crowded() {
  std::vector<th_sched_seq> seqs;
  for (uint64_t id = 1; id <= 8; ++id) seqs.push_back(seq(id, TH_SEQ_RUNNING, 0, id, 5, 5, 2));
  seqs.push_back(seq(9, TH_SEQ_WAITING, 0, 9, 4, 0, 0));
  return seqs;
}

bool runs(const SchedDecision& d, uint64_t id) {
  return std::any_of(d.run.begin(), d.run.end(), [&](const th_sched_item& it) { return it.seq_id == id; });
}

}  // namespace

TEST_CASE("scheduler.continuous gives a one-sequence client a slot among another client's many", "[scheduler][continuous][fair]") {
  const std::vector<th_sched_seq> seqs = crowded();
  const std::vector<uint32_t> clients = {7, 7, 7, 7, 7, 7, 7, 7, 3};  // numbers are not dense
  th_sched_state st = sched_state(seqs, 100, 4, 512, 4);  // four slots for nine sequences
  st.seq_clients = clients.data();
  Scheduler fair = continuous_fair(true), unfair = continuous_fair(false);
  SchedDecision d = fair.schedule(st);
  check_sched_decision(st, 256, d);
  CHECK(runs(d, 9));
  CHECK(d.run.size() == 4);
  CHECK(runs(d, 1));  // client 7's first sequence keeps its turn
  // Without fair share, client 7's running decodes take every slot.
  d = unfair.schedule(st);
  CHECK_FALSE(runs(d, 9));
  // A state as a 1.2 host fills it (no seq_clients member): one client, the order of old.
  th_sched_state old = st;
  old.struct_size = uint32_t(TH_SIZE_THROUGH(th_sched_state, now_ns));
  d = fair.schedule(old);
  CHECK_FALSE(runs(d, 9));
  CHECK(ids(d.run) == ids(unfair.schedule(st).run));
}

TEST_CASE("scheduler.continuous takes blocks from the client that holds the most for another client's first sequence", "[scheduler][continuous][fair]") {
  const std::vector<th_sched_seq> seqs = crowded();
  const std::vector<uint32_t> clients = {0, 0, 0, 0, 0, 0, 0, 0, 1};
  th_sched_state st = sched_state(seqs, 0, 4, 512, 16);  // the pool is full
  st.seq_clients = clients.data();
  Scheduler fair = continuous_fair(true), unfair = continuous_fair(false);
  SchedDecision d = fair.schedule(st);
  check_sched_decision(st, 256, d);
  CHECK(runs(d, 9));
  CHECK(d.preempt == std::vector<uint64_t>{8});  // client 0's latest
  // Same priority, no fair share: nobody is preempted and client 1 waits.
  d = unfair.schedule(st);
  CHECK(d.preempt.empty());
  CHECK_FALSE(runs(d, 9));
  // One client: its own later sequence is never preempted for its waiting one.
  const std::vector<uint32_t> one = {5, 5, 5, 5, 5, 5, 5, 5, 5};
  st.seq_clients = one.data();
  d = fair.schedule(st);
  CHECK(d.preempt.empty());
}

TEST_CASE("scheduler.continuous decisions keep every invariant with random clients", "[scheduler][continuous][fair]") {
  auto rng = fresh_rng("scheduler.continuous random clients");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  Scheduler fair = continuous_fair(true);
  int cross_client_preemptions = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const uint32_t bs = std::vector<uint32_t>{1, 4, 16}[u(0, 2)];
    const std::vector<th_sched_seq> seqs = random_sched_seqs(rng, bs, trial % 2 == 0);
    std::vector<uint32_t> clients;
    for (size_t i = 0; i < seqs.size(); ++i) clients.push_back(u(0, 3));
    th_sched_state st = sched_state(seqs, u(0, 1) ? u(0, 4) : u(0, 100), bs, u(1, 512), u(1, 24));
    st.seq_clients = clients.data();
    INFO("trial " << trial);
    const SchedDecision d = fair.schedule(st);
    check_sched_decision(st, 256, d);
    for (uint64_t id : d.preempt) {
      const size_t v = size_t(std::find_if(seqs.begin(), seqs.end(), [&](const auto& s) { return s.seq_id == id; }) - seqs.begin());
      for (const auto& item : d.run) {
        const size_t r = size_t(std::find_if(seqs.begin(), seqs.end(), [&](const auto& s) { return s.seq_id == item.seq_id; }) - seqs.begin());
        cross_client_preemptions += seqs[r].state != TH_SEQ_RUNNING && clients[r] != clients[v] &&
                                    seqs[r].priority == seqs[v].priority;
      }
    }
  }
  INFO("admissions beside a preemption of another client's sequence of the same priority: " << cross_client_preemptions);
  CHECK(cross_client_preemptions > 0);
}

TEST_CASE("scheduler.continuous: a 1-sequence client's request starts within 3 steps while another client runs 48", "[scheduler][continuous][fair]") {
  auto rng = fresh_rng("scheduler.continuous fair simulation");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  for (const bool tight : {false, true}) {
    SimConfig cfg;
    cfg.block_size = 4;
    cfg.total_blocks = tight ? 100 : 2000;  // tight: client 0 alone wants ~48 x 11 = 528 blocks
    cfg.max_step_tokens = 256;
    cfg.max_step_seqs = 16;
    std::vector<SimRequest> requests;
    for (int i = 0; i < 48; ++i) requests.push_back(SimRequest{0, 0, u(8, 16), u(24, 32), 0});
    std::vector<size_t> small;
    for (uint64_t at = 5; at < 125; at += 6) {
      small.push_back(requests.size());
      requests.push_back(SimRequest{at, 0, u(4, 12), 2, 1});
    }
    std::stable_sort(requests.begin(), requests.end(), [](const SimRequest& a, const SimRequest& b) { return a.arrival_step < b.arrival_step; });
    small.clear();
    for (size_t i = 0; i < requests.size(); ++i)
      if (requests[i].client == 1) small.push_back(i);
    cfg.step_bound = sim_step_bound(requests);
    INFO((tight ? "tight pool" : "roomy pool"));
    Scheduler fair = continuous_fair(true), unfair = continuous_fair(false);
    const SimResult r = simulate(fair, requests, cfg);
    CHECK(r.failed.empty());
    CHECK(r.finished_at.size() == requests.size());
    uint64_t worst = 0;
    for (size_t i : small) worst = std::max(worst, r.first_token_at.at(i) - requests[i].arrival_step);
    CHECK(worst <= 3);
    if (tight) CHECK(r.preemptions > 0);
    // The same load without fair share keeps the small client waiting behind the large one's decodes.
    const SimResult b = simulate(unfair, requests, cfg);
    uint64_t worst_unfair = 0;
    for (size_t i : small) worst_unfair = std::max(worst_unfair, b.first_token_at.at(i) - requests[i].arrival_step);
    INFO("worst wait for a first token: fair " << worst << " steps, not fair " << worst_unfair);
    CHECK(worst_unfair > 3);
  }
}

}  // namespace scheduler_continuous_tests
