// kvcache.prefix: prefix reuse by reference, the last block of a prompt cached whole recomputed, salts
// kept apart, eviction of the least recently used unheld block (leaves first), pinned blocks never
// evicted, a published block written in place leaving the cache, flush, seq_publish's errors, and
// random request streams checked against a model: exact accounting (used + free + cached == total,
// held == the blocks the sequences' tables hold) and every reused position holding the keys written
// for the same salt and tokens.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kv_cache.hpp"

namespace kvcache_prefix_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

const ModelSpec kSpec = model_spec(4, 1, 4, /*n_layers=*/1);

// kvcache.prefix's members beyond the paged ones.
struct PrefixCache : KvCache {
  PrefixCache(uint32_t block_size, uint32_t n_blocks) : KvCache("kvcache.prefix", kSpec, block_size, n_blocks) {
    REQUIRE(vt->seq_lookup != nullptr);
    REQUIRE(vt->seq_publish != nullptr);
    REQUIRE(vt->cache_flush != nullptr);
  }
  uint32_t lookup(uint64_t seq, uint64_t salt, const std::vector<int32_t>& tokens) {
    th_error err;
    uint32_t n = 12345;
    REQUIRE(vt->seq_lookup(inst->handle(), seq, salt, tokens.data(), uint32_t(tokens.size()), &n, &err) == TH_OK);
    return n;
  }
  th_status publish(uint64_t seq, uint32_t first, const std::vector<int32_t>& tokens) {
    th_error err;
    const th_status s = vt->seq_publish(inst->handle(), seq, first, tokens.data(), uint32_t(tokens.size()), &err);
    last_error = err.text();
    return s;
  }
  void flush() { vt->cache_flush(inst->handle()); }
  // The value the test writes as key element 0 of a position: a function of the salt and every token
  // through it, so a reused position shows whether its keys are those of the same prefix.
  static float stamp(uint64_t salt, const std::vector<int32_t>& tokens, uint32_t p) {
    uint64_t h = salt * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t i = 0; i <= p; ++i) h = (h ^ uint64_t(tokens[i] + 7)) * 1099511628211ull;
    return float(h % 1000003);
  }
  // Computes positions [from, to) of seq: reserves them and writes their stamps.
  void compute(uint64_t seq, uint64_t salt, const std::vector<int32_t>& tokens, uint32_t from, uint32_t to) {
    REQUIRE(reserve(seq, to, from) == TH_OK);
    const std::vector<int32_t> t = table(seq);
    for (uint32_t p = from; p < to; ++p) {
      const float x[4] = {stamp(salt, tokens, p), 0, 0, 0};
      kv_store(*layout, kv_vector(*layout, layout->k_base, 0, t[p / layout->block_size], p % layout->block_size, 0), x, 4);
    }
  }
  float key0(uint64_t seq, uint32_t p) {
    const std::vector<int32_t> t = table(seq);
    float x[4];
    kv_load(*layout, kv_vector(*layout, layout->k_base, 0, t[p / layout->block_size], p % layout->block_size, 0), x, 4);
    return x[0];
  }
  // A request from arrival to end: lookup, compute the rest of the prompt, publish it.
  uint32_t serve(uint64_t seq, uint64_t salt, const std::vector<int32_t>& tokens) {
    const uint32_t cached = lookup(seq, salt, tokens);
    compute(seq, salt, tokens, cached, uint32_t(tokens.size()));
    REQUIRE(publish(seq, cached, std::vector<int32_t>(tokens.begin() + cached, tokens.end())) == TH_OK);
    return cached;
  }
  void check_accounting() {
    const th_kv_stats s = stats();
    REQUIRE(s.struct_size == sizeof(th_kv_stats));
    CHECK(s.used_blocks + s.free_blocks + s.cached_blocks == s.total_blocks);
  }
};

std::vector<int32_t> tokens_of(std::initializer_list<std::pair<int32_t, uint32_t>> runs) {  // (first token, count) runs
  std::vector<int32_t> t;
  for (auto [first, n] : runs)
    for (uint32_t i = 0; i < n; ++i) t.push_back(first + int32_t(i));
  return t;
}

}  // namespace

TEST_CASE("kvcache.prefix gives a new prompt the full blocks another published by reference", "[kvcache][prefix]") {
  PrefixCache c(16, 12);
  const auto a = tokens_of({{100, 40}});
  CHECK(c.serve(1, 5, a) == 0);
  const std::vector<int32_t> a_table = c.table(1);
  c.free(1);
  th_kv_stats s = c.stats();
  CHECK(s.cached_blocks == 2);  // two full blocks; the partial third went back to the free list
  CHECK(s.free_blocks == 10);
  CHECK(s.published_blocks == 2);
  c.check_accounting();
  // Same 35 first tokens, then others: the two full blocks are reused, the same pool blocks.
  auto b = tokens_of({{100, 35}, {900, 10}});
  CHECK(c.lookup(2, 5, b) == 32);
  const std::vector<int32_t> b_table = c.table(2);
  REQUIRE(b_table.size() == 2);
  CHECK(b_table[0] == a_table[0]);
  CHECK(b_table[1] == a_table[1]);
  for (uint32_t p = 0; p < 32; ++p) CHECK(c.key0(2, p) == PrefixCache::stamp(5, b, p));
  s = c.stats();
  CHECK(s.cached_blocks == 0);  // held again: pinned
  CHECK(s.used_blocks == 2);
  CHECK(s.held_blocks == 2);
  // A second holder shares them; held counts each holder.
  CHECK(c.lookup(3, 5, b) == 32);
  s = c.stats();
  CHECK(s.used_blocks == 2);
  CHECK(s.shared_blocks == 2);
  CHECK(s.held_blocks == 4);
  c.check_accounting();
}

TEST_CASE("kvcache.prefix recomputes the last block of a prompt it holds whole and keeps salts apart", "[kvcache][prefix]") {
  PrefixCache c(8, 10);
  const auto a = tokens_of({{1, 24}});
  c.serve(1, 0, a);
  c.free(1);
  CHECK(c.lookup(2, 0, a) == 16);  // the last token is computed: its block is recomputed, not written shared
  CHECK(c.lookup(3, 1, a) == 0);   // another salt: nothing shared
  CHECK(c.table(3).empty());
  const auto shorter = tokens_of({{1, 7}});
  CHECK(c.lookup(4, 0, shorter) == 0);  // no full block in the prompt
  c.check_accounting();
}

TEST_CASE("kvcache.prefix evicts the least recently used unheld block without cached children first", "[kvcache][prefix]") {
  PrefixCache c(4, 6);
  const auto a = tokens_of({{10, 12}});  // three blocks: a chain root -> middle -> leaf
  const auto b = tokens_of({{50, 8}});   // two blocks, published after a
  c.serve(1, 0, a);
  c.free(1);
  c.serve(2, 0, b);
  c.free(2);
  REQUIRE(c.stats().cached_blocks == 5);
  REQUIRE(c.stats().free_blocks == 1);
  // Three fresh blocks: the free one, then a's leaf (a is older than b, its leaf has no children),
  // then a's middle (now a leaf itself, and older than b's).
  REQUIRE(c.reserve(3, 12, 0) == TH_OK);
  th_kv_stats s = c.stats();
  CHECK(s.evicted_blocks == 2);
  CHECK(s.cached_blocks == 3);
  c.check_accounting();
  c.free(3);
  CHECK(c.lookup(4, 0, tokens_of({{10, 12}, {0, 1}})) == 4);  // a's root survived
  CHECK(c.lookup(5, 0, tokens_of({{50, 8}, {0, 1}})) == 8);   // b whole
  c.check_accounting();
}

TEST_CASE("kvcache.prefix never evicts a block a sequence holds", "[kvcache][prefix]") {
  PrefixCache c(4, 4);
  const auto a = tokens_of({{10, 12}, {0, 1}});
  c.serve(1, 0, a);  // 4 blocks: 13 positions
  c.free(1);
  REQUIRE(c.stats().cached_blocks == 3);
  CHECK(c.lookup(2, 0, a) == 12);  // pins all three
  CHECK(c.reserve(3, 8, 0) == TH_ERR_RESOURCE_EXHAUSTED);  // one free block; the pinned ones stay
  CHECK(c.stats().evicted_blocks == 0);
  REQUIRE(c.reserve(3, 4, 0) == TH_OK);
  c.check_accounting();
}

TEST_CASE("kvcache.prefix takes a published block out of the cache before it is written in place", "[kvcache][prefix]") {
  PrefixCache c(4, 6);
  const auto a = tokens_of({{10, 8}});
  c.serve(1, 0, a);  // two published blocks, held by sequence 1 alone
  REQUIRE(c.truncate(1, 6) == TH_OK);
  REQUIRE(c.reserve(1, 8, 6) == TH_OK);  // rewrites positions 6 and 7 of the second block
  c.free(1);
  CHECK(c.lookup(2, 0, tokens_of({{10, 8}, {0, 1}})) == 4);  // the first block only
  c.check_accounting();
}

TEST_CASE("kvcache.prefix flush frees the unheld cached blocks and forgets the held ones", "[kvcache][prefix]") {
  PrefixCache c(4, 8);
  c.serve(1, 0, tokens_of({{10, 8}}));
  c.serve(2, 0, tokens_of({{50, 8}}));
  c.free(1);
  REQUIRE(c.stats().cached_blocks == 2);
  c.flush();
  th_kv_stats s = c.stats();
  CHECK(s.cached_blocks == 0);
  CHECK(s.free_blocks == 6);
  CHECK(s.used_blocks == 2);  // sequence 2 keeps its blocks
  c.free(2);
  CHECK(c.stats().free_blocks == 8);  // no longer cached: freed
  CHECK(c.lookup(3, 0, tokens_of({{50, 8}, {0, 1}})) == 0);
  c.check_accounting();
}

TEST_CASE("kvcache.prefix refuses a publish with a gap and a lookup of a sequence that exists", "[kvcache][prefix]") {
  PrefixCache c(4, 8);
  const auto a = tokens_of({{10, 8}});
  CHECK(c.lookup(1, 0, a) == 0);
  c.compute(1, 0, a, 0, 8);
  CHECK(c.publish(1, 2, {12, 13}) == TH_ERR_INVALID_ARGUMENT);
  CHECK_THAT(c.last_error, Catch::Contains("from position 2") && Catch::Contains("published 0"));
  CHECK(c.publish(1, 0, tokens_of({{10, 12}})) == TH_ERR_INVALID_ARGUMENT);  // past the blocks it holds
  CHECK_THAT(c.last_error, Catch::Contains("holds 2 blocks"));
  CHECK(c.publish(99, 0, a) == TH_ERR_NOT_FOUND);
  REQUIRE(c.reserve(7, 8, 0) == TH_OK);
  CHECK(c.publish(7, 0, a) == TH_OK);  // made by seq_reserve: not in the cache, ignored
  CHECK(c.stats().published_blocks == 0);
  th_error err;
  uint32_t n = 0;
  CHECK(c.vt->seq_lookup(c.inst->handle(), 1, 0, a.data(), 8, &n, &err) == TH_ERR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(err.text()), Catch::Contains("exists"));
}

TEST_CASE("kvcache.prefix stays exact and serves only matching keys over random request streams", "[kvcache][prefix]") {
  auto rng = fresh_rng("kvcache.prefix random streams");
  const uint32_t bs = 4;
  PrefixCache c(bs, 24);
  // Prompts drawn from a few stems so that prefixes recur; tokens from a small alphabet.
  std::vector<std::vector<int32_t>> stems;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> s(4 + rng() % 14);
    for (auto& t : s) t = int32_t(rng() % 5);
    stems.push_back(s);
  }
  struct Live {
    uint64_t salt;
    std::vector<int32_t> tokens;
    uint32_t computed;  // positions written
  };
  std::map<uint64_t, Live> live;
  uint64_t next = 1, hits = 0, evictions_seen = 0;
  for (int op = 0; op < 3000; ++op) {
    const uint32_t what = uint32_t(rng() % 10);
    if (what < 4 || live.empty()) {  // a request arrives
      const uint64_t salt = rng() % 2;
      std::vector<int32_t> t = stems[rng() % stems.size()];
      for (uint32_t k = uint32_t(rng() % 6); k > 0; --k) t.push_back(int32_t(rng() % 5));
      const uint64_t seq = next++;
      const uint32_t cached = c.lookup(seq, salt, t);
      REQUIRE(cached < t.size());
      REQUIRE(cached % bs == 0);
      for (uint32_t p = 0; p < cached; ++p) REQUIRE(c.key0(seq, p) == PrefixCache::stamp(salt, t, p));
      hits += cached > 0;
      live[seq] = {salt, t, cached};
    } else if (what < 7) {  // a live one computes a chunk (or a generated token) and publishes it
      auto it = std::next(live.begin(), long(rng() % live.size()));
      Live& l = it->second;
      if (l.computed == l.tokens.size()) l.tokens.push_back(int32_t(rng() % 5));  // decoding
      const uint32_t to = std::min<uint32_t>(uint32_t(l.tokens.size()), l.computed + 1 + uint32_t(rng() % 6));
      if (c.reserve(it->first, to, l.computed) == TH_ERR_RESOURCE_EXHAUSTED) {  // the pool is full: it is preempted
        c.free(it->first);
        live.erase(it);
      } else {
        const std::vector<int32_t> t = c.table(it->first);
        for (uint32_t p = l.computed; p < to; ++p) {
          const float x[4] = {PrefixCache::stamp(l.salt, l.tokens, p), 0, 0, 0};
          kv_store(*c.layout, kv_vector(*c.layout, c.layout->k_base, 0, t[p / bs], p % bs, 0), x, 4);
        }
        REQUIRE(c.publish(it->first, l.computed, std::vector<int32_t>(l.tokens.begin() + l.computed, l.tokens.begin() + to)) == TH_OK);
        l.computed = to;
      }
    } else if (what < 8) {  // a rejected draft: positions given back (never below what was published)
      auto it = std::next(live.begin(), long(rng() % live.size()));
      REQUIRE(c.truncate(it->first, it->second.computed) == TH_OK);
    } else {  // a request ends
      auto it = std::next(live.begin(), long(rng() % live.size()));
      c.free(it->first);
      live.erase(it);
    }
    const th_kv_stats s = c.stats();
    REQUIRE(s.used_blocks + s.free_blocks + s.cached_blocks == s.total_blocks);
    uint32_t held = 0;
    std::set<int32_t> distinct;
    for (const auto& [seq, l] : live) {
      const auto t = c.table(seq);
      REQUIRE(t.size() == (l.computed + bs - 1) / bs);
      held += uint32_t(t.size());
      distinct.insert(t.begin(), t.end());
    }
    REQUIRE(s.held_blocks == held);
    REQUIRE(s.used_blocks == distinct.size());
    REQUIRE(s.n_seqs == live.size());
    evictions_seen = s.evicted_blocks;
  }
  CHECK(hits > 100);           // prefixes recurred and were reused
  CHECK(evictions_seen > 10);  // the pool was under pressure
  for (const auto& [seq, l] : live) c.free(seq);
  const th_kv_stats end = c.stats();
  CHECK(end.used_blocks == 0);
  CHECK(end.free_blocks + end.cached_blocks == end.total_blocks);
}

TEST_CASE("kvcache.prefix without lookups keeps kvcache.paged's accounting over random reserve/fork/free", "[kvcache][prefix]") {
  auto rng = fresh_rng("kvcache.prefix paged accounting");
  KvCache c("kvcache.prefix", kSpec, 4, 40);
  run_random_kv_ops(c, rng, 400, /*check_data=*/true);
}

TEST_CASE("kvcache.prefix: a sequence whose window slid publishes no more and its moved blocks leave the cache", "[kvcache][prefix][window]") {
  const uint32_t bs = 4;
  PrefixCache c(bs, 16);
  const std::vector<int32_t> prompt = tokens_of({{10, 16}});  // 4 blocks
  REQUIRE(c.serve(1, 7, prompt) == 0);
  CHECK(c.stats().published_blocks == 4);
  // A second sequence shares the first three blocks (the last one of a whole prompt is recomputed).
  const std::vector<int32_t> longer = tokens_of({{10, 16}, {40, 8}});
  REQUIRE(c.lookup(2, 7, longer) == 16);
  c.compute(2, 7, longer, 16, 24);
  REQUIRE(c.drop(2, 1, 1) == TH_OK);  // block 1 goes; blocks 2 and 3 (shared with sequence 1) are copied
  const std::vector<int32_t> t1 = c.table(1), t2 = c.table(2);
  REQUIRE(t2.size() == 5);
  CHECK(t2[0] == t1[0]);
  CHECK(t2[1] != t1[2]);
  CHECK(t2[2] != t1[3]);
  for (uint32_t p = bs; p < 3 * bs; ++p) CHECK(c.key0(2, p) == c.key0(1, p + bs));
  const uint64_t published = c.stats().published_blocks;
  // Publishing what it computed adds nothing: its positions are no longer a prefix of its tokens.
  CHECK(c.publish(2, 16, std::vector<int32_t>(longer.begin() + 16, longer.end())) == TH_OK);
  CHECK(c.stats().published_blocks == published);
  c.check_accounting();
  // Sequence 1's blocks are still cached whole: a new prompt finds them.
  c.free(1);
  c.free(2);
  CHECK(c.lookup(3, 7, longer) == 16);
  c.check_accounting();
}

}  // namespace kvcache_prefix_tests
