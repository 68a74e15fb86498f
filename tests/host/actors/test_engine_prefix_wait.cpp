// Admission behind a shared prefix (actors/engine_prefix_wait.cpp), on an engine's state made by hand:
// which arriving prompt waits for which leader and for how many positions, and when each wait ends.
#include <catch2/catch.hpp>

#include <random>

#include "actors/engine_state.hpp"
#include "harness.hpp"

namespace actors_engine_prefix_wait_tests {

using namespace tokenhost;
using namespace tokenhost::engine_detail;
using namespace tokenhost::testing;

namespace {

constexpr uint32_t kBlock = 16;

std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 1000);
  return t;
}

// A sequence of `prompt`, looked up (in the prefix cache) and waiting for its first step.
Sequence arrived(uint64_t id, const std::vector<int32_t>& prompt, int32_t priority = 0) {
  Sequence q;
  q.request.id = id;
  q.request.priority = priority;
  q.context = std::make_shared<SequenceContext>(SamplingParams{});
  q.context->tokens = prompt;
  q.context->prompt_tokens = prompt.size();
  q.in_kvcache = true;
  return q;
}

// prompt's first `shared` tokens, then `rest` others.
std::vector<int32_t> sharing(std::mt19937_64& rng, const std::vector<int32_t>& prompt, size_t shared, size_t rest) {
  std::vector<int32_t> t(prompt.begin(), prompt.begin() + long(shared));
  for (size_t i = 0; i < rest; ++i) t.push_back(1000 + int32_t(rng() % 1000));  // never the prompt's next
  return t;
}

EngineState state_with(std::vector<Sequence> seqs) {
  EngineState s;
  s.kv.block_size = kBlock;
  s.seqs = std::move(seqs);
  return s;
}

}  // namespace

TEST_CASE("prefix waits: a prompt waits for the whole blocks it shares with one still to be computed", "[prefix][engine]") {
  auto rng = fresh_rng("prefix waits");
  const std::vector<int32_t> leader = random_tokens(rng, 200);
  for (size_t shared : {size_t(16), size_t(37), size_t(150), size_t(200)}) {
    INFO(shared << " tokens shared");
    EngineState s = state_with({arrived(1, leader)});
    s.seqs[0].lookup_pending = true;  // looking up: what it holds is not known yet
    s.seqs.push_back(arrived(2, sharing(rng, leader, shared, 20)));
    s.seqs[1].in_kvcache = false;  // arriving: not looked up
    REQUIRE(wait_for_prefix(s, s.seqs[1]));
    CHECK(s.seqs[1].prefix_leader == 1);
    CHECK(s.seqs[1].prefix_shared == shared / kBlock * kBlock);
    CHECK(s.prefix_waits == 1);
    // It waits while the leader has computed less than that, and not once it has.
    s.seqs[0].lookup_pending = false;
    s.seqs[0].state = TH_SEQ_RUNNING;
    s.seqs[0].prefilled = s.seqs[1].prefix_shared - 1;
    CHECK(prefix_waits_over(s).empty());
    CHECK(s.seqs[1].prefix_leader == 1);
    s.seqs[0].prefilled = s.seqs[1].prefix_shared;
    CHECK(prefix_waits_over(s) == std::vector<uint64_t>{2});
    CHECK(s.seqs[1].prefix_leader == 0);
  }
}

TEST_CASE("prefix waits: no wait behind what is not a leader", "[prefix][engine]") {
  auto rng = fresh_rng("prefix no waits");
  const std::vector<int32_t> prompt = random_tokens(rng, 120);
  auto waits = [&](Sequence leader, const std::vector<int32_t>& follower, int32_t priority = 0) {
    EngineState s = state_with({std::move(leader)});
    s.seqs.push_back(arrived(2, follower, priority));
    s.seqs[1].in_kvcache = false;
    const bool w = wait_for_prefix(s, s.seqs[1]);
    CHECK(w == (s.seqs[1].prefix_leader != 0));
    return w;
  };
  const std::vector<int32_t> follower = sharing(rng, prompt, 96, 10);
  CHECK(waits(arrived(1, prompt), follower));  // the case the others change one thing of
  CHECK_FALSE(waits(arrived(1, prompt), sharing(rng, prompt, kBlock - 1, 10)));  // not one whole block
  CHECK_FALSE(waits(arrived(1, prompt), std::vector<int32_t>(prompt.begin(), prompt.begin() + kBlock)));  // its last token computes
  Sequence other_ns = arrived(1, prompt);
  other_ns.cache_ns = 7;  // another API key or cache_salt: nothing shared
  CHECK_FALSE(waits(other_ns, follower));
  CHECK_FALSE(waits(arrived(1, prompt, -1), follower));  // a lower priority
  CHECK(waits(arrived(1, prompt, 1), follower));          // a higher one
  Sequence unlooked = arrived(1, prompt);
  unlooked.in_kvcache = false;  // prompt log-probabilities: computes, publishes nothing
  CHECK_FALSE(waits(unlooked, follower));
  Sequence decoding = arrived(1, prompt);
  decoding.generated = 1;
  CHECK_FALSE(waits(decoding, follower));
  Sequence done = arrived(1, prompt);
  done.prefilled = 96;  // computed already: the lookup finds it
  CHECK_FALSE(waits(done, follower));
  Sequence preempted = arrived(1, prompt);
  preempted.state = TH_SEQ_PREEMPTED;
  CHECK_FALSE(waits(preempted, follower));
  Sequence waiting = arrived(1, prompt);
  waiting.prefix_leader = 9;  // waits itself: its own leader is the one to follow
  CHECK_FALSE(waits(waiting, follower));
}

TEST_CASE("prefix waits: a wait ends when its leader stops computing its prompt, and all end on demand", "[prefix][engine]") {
  auto rng = fresh_rng("prefix waits end");
  const std::vector<int32_t> prompt = random_tokens(rng, 100);
  auto waiting_state = [&] {
    EngineState s = state_with({arrived(1, prompt), arrived(2, sharing(rng, prompt, 64, 5)), arrived(3, sharing(rng, prompt, 80, 5))});
    for (size_t i : {size_t(1), size_t(2)}) {
      s.seqs[i].in_kvcache = false;
      REQUIRE(wait_for_prefix(s, s.seqs[i]));
    }
    REQUIRE(s.prefix_waits == 2);
    return s;
  };
  SECTION("finished or failed: gone") {
    EngineState s = waiting_state();
    s.seqs.erase(s.seqs.begin());
    CHECK(prefix_waits_over(s) == std::vector<uint64_t>{2, 3});
  }
  SECTION("preempted") {
    EngineState s = waiting_state();
    s.seqs[0].state = TH_SEQ_PREEMPTED;
    CHECK(prefix_waits_over(s) == std::vector<uint64_t>{2, 3});
  }
  SECTION("cancelled") {
    EngineState s = waiting_state();
    s.seqs[0].cancel_requested = true;
    CHECK(prefix_waits_over(s) == std::vector<uint64_t>{2, 3});
  }
  SECTION("each when its own positions are computed") {
    EngineState s = waiting_state();
    s.seqs[0].prefilled = 64;
    CHECK(prefix_waits_over(s) == std::vector<uint64_t>{2});
    s.seqs[0].prefilled = 96;
    CHECK(prefix_waits_over(s) == std::vector<uint64_t>{3});
  }
  SECTION("all, when a step runs nothing") {
    EngineState s = waiting_state();
    CHECK(prefix_waits_over(s).empty());
    CHECK(prefix_waits_over(s, true) == std::vector<uint64_t>{2, 3});
    CHECK(prefix_waits_over(s).empty());
  }
}

}  // namespace actors_engine_prefix_wait_tests
