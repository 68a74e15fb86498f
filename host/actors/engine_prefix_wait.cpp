// Admission behind a shared prefix. Prompts that arrive together and share a long prefix (a system
// prompt, a document asked several questions) would each compute it: their lookups on arrival come
// before any of them has published a block. Instead, a prompt whose whole blocks another sequence (its
// leader) has yet to compute waits, unseen by the scheduler, until the leader has computed them, and
// then looks up and adopts them: the prefix is computed once, and the waiting prompts compute only what
// is theirs, all in the steps right after it.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "actors/engine_state.hpp"

namespace tokenhost::engine_detail {

namespace {

// A sequence whose prompt is being computed, or will be, into blocks the prefix cache publishes.
bool computes_prompt(const Sequence& l) {
  return l.in_kvcache && l.generated == 0 && l.prefix_leader == 0 && l.state != TH_SEQ_PREEMPTED && !l.cancelled();
}

uint32_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  return uint32_t(std::mismatch(a.begin(), a.begin() + long(n), b.begin()).first - a.begin());
}

// Whether leader l has computed the first `shared` positions (or never will): its blocks are published
// when the step that computed them ends, before the engine counts them in prefilled.
bool leader_done(const Sequence* l, uint32_t shared) {
  return l == nullptr || !computes_prompt(*l) || (!l->lookup_pending && l->prefilled >= shared);
}

}  // namespace

bool wait_for_prefix(EngineState& s, Sequence& q) {
  const uint32_t bs = s.kv.block_size;
  if (bs == 0 || q.prompt_len() == 0) return false;
  // A lookup gives whole blocks and leaves the prompt's last token to compute.
  const uint32_t most = (q.prompt_len() - 1) / bs * bs;
  uint32_t best = 0;
  const Sequence* leader = nullptr;
  for (const Sequence& l : s.seqs) {
    // Not behind a lower priority: the scheduler may hold that one back for as long as others arrive.
    if (&l == &q || l.cache_ns != q.cache_ns || !computes_prompt(l) || l.request.priority < q.request.priority) continue;
    const uint32_t shared = std::min(most, common_prefix(l.tokens(), q.tokens()) / bs * bs);
    if (shared > best && !leader_done(&l, shared)) best = shared, leader = &l;
  }
  if (leader == nullptr) return false;
  q.prefix_leader = leader->request.id;
  q.prefix_shared = best;
  ++s.prefix_waits;
  spdlog::debug("engine {}: {} waits for {} to compute the {} prompt positions they share", s.init.name, q.request.label(),
                leader->request.label(), best);
  return true;
}

std::vector<uint64_t> prefix_waits_over(EngineState& s, bool all) {
  std::vector<uint64_t> over;
  for (Sequence& q : s.seqs) {
    if (q.prefix_leader == 0) continue;
    if (!all && !leader_done(find(s, q.prefix_leader), q.prefix_shared)) continue;
    q.prefix_leader = 0;
    q.prefix_shared = 0;
    over.push_back(q.request.id);
  }
  return over;
}

}  // namespace tokenhost::engine_detail
