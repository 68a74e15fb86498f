// tokenhost plugin SDK: helpers for router plugins (header only, C++17; th_router.h is the contract).
//
//   - least_loaded(): the healthy candidate with the fewest sequences running, the nearest among equals
//     (candidate_rtt_s, ABI 1.8: an engine of this process before a remote one), in rotation among
//     equally near ones;
//   - candidate_node(), candidate_rtt_s(): where a candidate runs (ABI 1.8; "" and 0 from an older host);
//     least_loaded_per_model(): one such candidate per model (a cascade's or an ensemble's stages);
//     least_loaded_if(): among the candidates a predicate takes; candidate_role(): an engine's role in
//     prefill/decode disaggregation (ABI 1.9; TH_ROLE_BOTH from an older host);
//   - set_target(), set_cascade(), set_disaggregate() (ABI 1.9), set_cached(): fill a th_route_decision;
//   - ResponseCache: an exact-match response cache. A request is answered from it only when the host
//     says the answer is deterministic (th_route_request.deterministic) and an earlier answer had the
//     same prompt tokens, the same params_key (sampling parameters, max_tokens, model) and the same
//     cache_namespace (API key and cache_salt: never across clients), within a TTL; it holds at most
//     max_entries answers and max_bytes of tokens, the least recently used going first.
// Needs ABI 1.7 (the members it reads are checked with TH_HAS_MEMBER: with an older host nothing is
// ever cached).
#ifndef TOKENHOST_PLUGIN_ROUTE_HPP
#define TOKENHOST_PLUGIN_ROUTE_HPP

#include <tokenhost/plugin.hpp>

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace tokenhost::sdk {

// The cluster node candidate i runs on ("" for an engine of the host's own process, and from a host
// before 1.8).
inline const char* candidate_node(const th_route_request& request, uint32_t i) {
  if (!TH_HAS_MEMBER(&request, th_route_request, candidate_nodes) || request.candidate_nodes == nullptr) return "";
  return request.candidate_nodes[i] != nullptr ? request.candidate_nodes[i] : "";
}

// The round trip in seconds of the host's link to candidate i's node: 0 for an engine of its own
// process (and from a host before 1.8), -1 while not yet measured.
inline double candidate_rtt_s(const th_route_request& request, uint32_t i) {
  if (!TH_HAS_MEMBER(&request, th_route_request, candidate_rtt_s) || request.candidate_rtt_s == nullptr) return 0.0;
  return request.candidate_rtt_s[i];
}

// Candidate i's role in prefill/decode disaggregation (ABI 1.9; TH_ROLE_BOTH from an older host).
inline th_engine_role candidate_role(const th_route_request& request, uint32_t i) {
  if (!TH_HAS_MEMBER(&request, th_route_request, candidate_roles) || request.candidate_roles == nullptr) return TH_ROLE_BOTH;
  return request.candidate_roles[i];
}

// least_loaded() among the healthy candidates `accept(i)` takes; n_candidates when there is none.
template <class Accept>
uint32_t least_loaded_if(const th_route_request& request, uint64_t rotation, Accept accept) {
  const uint32_t n = request.n_candidates;
  uint32_t best = n;
  auto distance = [&](uint32_t i) {
    const double rtt = candidate_rtt_s(request, i);
    return rtt < 0 ? int64_t(1) << 40 : int64_t(rtt * 1000.0);
  };
  for (uint32_t step = 0; step < n; ++step) {
    const uint32_t i = uint32_t((rotation + step) % n);
    const th_route_candidate& c = request.candidates[i];
    if (c.healthy == 0 || !accept(i)) continue;
    if (best == n || c.running < request.candidates[best].running ||
        (c.running == request.candidates[best].running && distance(i) < distance(best)))
      best = i;
  }
  return best;
}

// The healthy candidate with the fewest sequences running; among equals the nearest (the smallest
// round trip in whole milliseconds, an unmeasured one last), and among equally near ones the first at
// or after `rotation` (modulo n_candidates), so that equal engines share the load. Throws when none
// is healthy.
inline uint32_t least_loaded(const th_route_request& request, uint64_t rotation) {
  const uint32_t best = least_loaded_if(request, rotation, [](uint32_t) { return true; });
  if (best == request.n_candidates)
    throw Error(TH_ERR_UNSUPPORTED, "no healthy engine among " + std::to_string(request.n_candidates) + " candidates");
  return best;
}

// One candidate per model among the healthy ones: the one with the fewest sequences running (the first
// of equals), in the order of the models' names. Throws when none is healthy.
inline std::vector<uint32_t> least_loaded_per_model(const th_route_request& request) {
  std::map<std::string, uint32_t> best;  // model -> candidate
  for (uint32_t i = 0; i < request.n_candidates; ++i) {
    const th_route_candidate& c = request.candidates[i];
    if (c.healthy == 0) continue;
    auto it = best.find(c.model);
    if (it == best.end()) best.emplace(c.model, i);
    else if (c.running < request.candidates[it->second].running) it->second = i;
  }
  if (best.empty()) throw Error(TH_ERR_UNSUPPORTED, "no healthy engine among " + std::to_string(request.n_candidates) + " candidates");
  std::vector<uint32_t> out;
  for (const auto& [model, i] : best) out.push_back(i);
  return out;
}

inline void set_target(th_route_decision& d, uint32_t target) {
  d.action = TH_ROUTE_TARGET;
  d.target = target;
  d.n_cascade = 0;
}

// Prefill/decode disaggregation (ABI 1.9): the prompt and the first token on candidate `prefill`, the
// rest on candidate `decode` (two engines of one model).
inline void set_disaggregate(th_route_decision& d, uint32_t prefill, uint32_t decode) {
  d.action = TH_ROUTE_DISAGGREGATE;
  d.n_cascade = 2;
  d.cascade[0] = prefill;
  d.cascade[1] = decode;
}

// A cascade over `order` (candidate indices, cheapest first), checked at every check_every tokens.
inline void set_cascade(th_route_decision& d, const std::vector<uint32_t>& order, uint32_t check_every) {
  d.action = TH_ROUTE_CASCADE;
  d.n_cascade = uint32_t(order.size());
  for (size_t i = 0; i < order.size(); ++i) d.cascade[i] = order[i];
  if (TH_HAS_MEMBER(&d, th_route_decision, check_every)) d.check_every = check_every;
}

class ResponseCache {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    double ttl_s = 300;           // an answer older than this is not given
    size_t max_entries = 10000;
    size_t max_bytes = 64u << 20;  // prompt and answer tokens, 4 bytes each, plus 64 per entry
  };
  explicit ResponseCache(Limits limits) : limits_(limits) {}
  // The limits from a plugin's config keys cache_ttl_s, cache_max_entries and cache_max_mb (MiB), which
  // its plugin.toml declares.
  static Limits limits_from(const Config& c) {
    Limits l;
    l.ttl_s = c.require_double("cache_ttl_s");
    l.max_entries = size_t(c.require_int("cache_max_entries"));
    l.max_bytes = size_t(c.require_int("cache_max_mb")) << 20;
    return l;
  }

  // Answers request from the cache when it can: fills decision (TH_ROUTE_CACHED, its tokens valid
  // until the next call on this cache) and returns true. now: for tests; the clock otherwise.
  bool answer(const th_route_request& request, th_route_decision& decision, Clock::time_point now = Clock::now()) {
    if (!TH_HAS_MEMBER(&request, th_route_request, payer) || !TH_HAS_MEMBER(&decision, th_route_decision, n_samples)) return false;
    if (request.deterministic == 0) return false;
    auto it = index_.find(Key{request.cache_namespace, request.params_key, hash(request.tokens, request.n_tokens)});
    if (it == index_.end()) {
      ++misses_;
      return false;
    }
    Entry& e = *it->second;
    if (!same_prompt(e, request.tokens, request.n_tokens)) {
      ++misses_;
      return false;
    }
    if (std::chrono::duration<double>(now - e.stored).count() > limits_.ttl_s) {
      drop(it->second);
      ++misses_;
      return false;
    }
    if (e.answer.size() > request.max_tokens) {  // stored for a longer max_tokens: params_key differs; defensive
      ++misses_;
      return false;
    }
    entries_.splice(entries_.begin(), entries_, it->second);  // most recently used first
    ++hits_;
    decision.action = TH_ROUTE_CACHED;
    decision.n_cascade = 0;
    decision.cached_tokens = e.answer.data();
    decision.n_cached_tokens = uint32_t(e.answer.size());
    decision.cached_stop = e.stop;
    return true;
  }

  // Keeps a deterministic answer that ended by itself (end of sequence or max_tokens) and came from
  // an engine (not from a cache).
  void remember(const th_route_feedback& f, Clock::time_point now = Clock::now()) {
    if (!TH_HAS_MEMBER(&f, th_route_feedback, signal)) return;
    if (f.ok == 0 || f.cached != 0 || f.deterministic == 0 || (f.stop != TH_STOP_EOS && f.stop != TH_STOP_LENGTH)) return;
    if (f.prompt_tokens == nullptr || (f.tokens_out > 0 && f.output_tokens == nullptr)) return;
    const Key key{f.cache_namespace, f.params_key, hash(f.prompt_tokens, f.n_prompt_tokens)};
    if (auto it = index_.find(key); it != index_.end()) drop(it->second);
    Entry e;
    e.key = key;
    e.prompt.assign(f.prompt_tokens, f.prompt_tokens + f.n_prompt_tokens);
    e.answer.assign(f.output_tokens, f.output_tokens + f.tokens_out);
    e.stop = f.stop;
    e.stored = now;
    if (bytes_of(e) > limits_.max_bytes) return;
    bytes_ += bytes_of(e);
    entries_.push_front(std::move(e));
    index_[key] = entries_.begin();
    while (!entries_.empty() && (entries_.size() > limits_.max_entries || bytes_ > limits_.max_bytes)) drop(std::prev(entries_.end()));
  }

  size_t entries() const { return entries_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Key {
    uint64_t ns, params, prompt;
    bool operator==(const Key& o) const { return ns == o.ns && params == o.params && prompt == o.prompt; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return size_t(k.ns * 0x9e3779b97f4a7c15ull ^ k.params * 0xc2b2ae3d27d4eb4full ^ k.prompt); }
  };
  struct Entry {
    Key key;
    std::vector<int32_t> prompt, answer;
    int32_t stop = TH_STOP_NONE;
    Clock::time_point stored;
  };
  using Iter = std::list<Entry>::iterator;

  static uint64_t hash(const int32_t* tokens, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; ++i) h = (h ^ uint32_t(tokens[i])) * 0x100000001b3ull;
    return h ^ n;
  }
  static bool same_prompt(const Entry& e, const int32_t* tokens, uint32_t n) {
    if (e.prompt.size() != n) return false;
    for (uint32_t i = 0; i < n; ++i)
      if (e.prompt[i] != tokens[i]) return false;
    return true;
  }
  static size_t bytes_of(const Entry& e) { return 4 * (e.prompt.size() + e.answer.size()) + 64; }
  void drop(Iter it) {
    bytes_ -= bytes_of(*it);
    index_.erase(it->key);
    entries_.erase(it);
  }

  Limits limits_;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<Key, Iter, KeyHash> index_;
  size_t bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_ROUTE_HPP
