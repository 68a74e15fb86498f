// The prefix summary behind cache-aware routing: block keys chain over the namespace and every token
// before a block's end; the bounded least-recently-used set of keys against a plain list on random
// streams of adds, touches, evictions and clears.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "harness.hpp"
#include "runtime/prefix_summary.hpp"

namespace runtime_prefix_summary_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::vector<uint64_t> keys_of(uint64_t ns, const std::vector<int32_t>& tokens, uint32_t block) {
  std::vector<uint64_t> keys;
  extend_prefix_block_keys(ns, tokens, uint32_t(tokens.size()), block, keys);
  return keys;
}

}  // namespace

TEST_CASE("prefix summary: block keys chain over the namespace and every token before each block's end", "[prefix_summary]") {
  auto rng = fresh_rng("prefix summary keys");
  for (int trial = 0; trial < 100; ++trial) {
    const uint32_t block = std::uniform_int_distribution<uint32_t>(1, 32)(rng);
    std::vector<int32_t> tokens(std::uniform_int_distribution<size_t>(0, 300)(rng));
    for (auto& t : tokens) t = std::uniform_int_distribution<int32_t>(0, 1000)(rng);
    const uint64_t ns = rng();
    const auto keys = keys_of(ns, tokens, block);
    INFO("trial " << trial << ": " << tokens.size() << " tokens, blocks of " << block);
    REQUIRE(keys.size() == tokens.size() / block);  // whole blocks only
    CHECK(keys_of(ns, tokens, block) == keys);
    CHECK(std::set<uint64_t>(keys.begin(), keys.end()).size() == keys.size());
    // Extending a few positions at a time gives the same keys as all at once.
    std::vector<uint64_t> grown;
    for (uint32_t at = 0; at <= tokens.size(); at += std::uniform_int_distribution<uint32_t>(1, 40)(rng))
      extend_prefix_block_keys(ns, tokens, at, block, grown);
    extend_prefix_block_keys(ns, tokens, uint32_t(tokens.size()), block, grown);
    CHECK(grown == keys);
    if (keys.empty()) continue;
    // Another namespace (another API key or cache_salt) changes every key.
    const auto other_ns = keys_of(ns + 1, tokens, block);
    for (size_t i = 0; i < keys.size(); ++i) CHECK(other_ns[i] != keys[i]);
    // One token changed in block j: the keys before j stay, j and every later one change.
    auto changed = tokens;
    const size_t at = std::uniform_int_distribution<size_t>(0, keys.size() * block - 1)(rng);
    changed[at] += 1;
    const auto after = keys_of(ns, changed, block);
    for (size_t i = 0; i < keys.size(); ++i) {
      INFO("token " << at << " changed, block " << i);
      if (i < at / block) CHECK(after[i] == keys[i]);
      else CHECK(after[i] != keys[i]);
    }
  }
  std::vector<uint64_t> none;
  extend_prefix_block_keys(7, {1, 2, 3}, 3, 0, none);
  CHECK(none.empty());  // no block size: no blocks
}

TEST_CASE("prefix summary: a bounded least-recently-used set, checked against a plain list", "[prefix_summary]") {
  auto rng = fresh_rng("prefix summary lru");
  for (int trial = 0; trial < 30; ++trial) {
    const size_t capacity = std::uniform_int_distribution<size_t>(1, 40)(rng);
    PrefixSummary summary(16, capacity);
    REQUIRE(summary.capacity() == capacity);
    std::vector<uint64_t> model;  // least recently used first
    auto model_add = [&](uint64_t k) {
      model.erase(std::remove(model.begin(), model.end(), k), model.end());
      model.push_back(k);
      if (model.size() > capacity) model.erase(model.begin(), model.begin() + long(model.size() - capacity));
    };
    auto random_keys = [&](size_t n) {
      std::vector<uint64_t> k(n);
      for (auto& x : k) x = std::uniform_int_distribution<uint64_t>(1, 60)(rng);  // few values: repeats
      return k;
    };
    for (int op = 0; op < 400; ++op) {
      const int what = std::uniform_int_distribution<int>(0, 99)(rng);
      if (what < 50) {
        const auto k = random_keys(std::uniform_int_distribution<size_t>(1, 8)(rng));
        summary.add(k.data(), k.size());
        for (uint64_t x : k) model_add(x);
      } else if (what < 70) {
        const auto k = random_keys(std::uniform_int_distribution<size_t>(0, 5)(rng));
        summary.touch(k);
        for (uint64_t x : k) model_add(x);
      } else if (what < 95) {
        const uint64_t n = std::uniform_int_distribution<uint64_t>(0, 6)(rng);
        summary.evict_oldest(n);
        model.erase(model.begin(), model.begin() + long(std::min<uint64_t>(n, model.size())));
      } else {
        summary.clear();
        model.clear();
      }
      INFO("trial " << trial << " op " << op);
      REQUIRE(summary.size() == model.size());
      REQUIRE(summary.keys() == model);
      // A copy made from its keys (a head's copy of a worker's summary) holds the same, in the same order.
      if (op % 50 == 0) {
        PrefixSummary copy(16, capacity);
        const uint64_t before = copy.version();
        copy.assign(summary.keys());
        REQUIRE(copy.keys() == model);
        REQUIRE(copy.version() != before);
      }
      const auto probe = random_keys(std::uniform_int_distribution<size_t>(0, 6)(rng));
      size_t want = 0;
      while (want < probe.size() && std::find(model.begin(), model.end(), probe[want]) != model.end()) ++want;
      REQUIRE(summary.leading_matches(probe) == want);
    }
  }
  CHECK(PrefixSummary(16, size_t(1) << 40).capacity() == PrefixSummary::kMaxBlocks);
}

TEST_CASE("prefix summary: every change moves its version, reads do not, assign keeps the newest that fit", "[prefix_summary]") {
  PrefixSummary s(16, 4);
  uint64_t v = s.version();
  auto moved = [&] {
    const bool m = s.version() != v;
    v = s.version();
    return m;
  };
  const std::vector<uint64_t> keys = {1, 2, 3};
  s.add(keys.data(), keys.size());
  CHECK(moved());
  s.touch({2});
  CHECK(moved());
  (void)s.leading_matches({1, 2});
  (void)s.keys();
  CHECK_FALSE(moved());
  s.evict_oldest(1);
  CHECK(moved());
  s.evict_oldest(0);
  CHECK_FALSE(moved());
  s.clear();
  CHECK(moved());
  s.assign({9, 8, 7, 6, 5, 4});  // six keys, room for four: the newest four
  CHECK(moved());
  CHECK(s.keys() == std::vector<uint64_t>{7, 6, 5, 4});
  CHECK(s.leading_matches({7, 6}) == 2);
  CHECK(s.leading_matches({9}) == 0);
}

TEST_CASE("prefix summary: its filter never turns away a key held and lets few others through", "[prefix_summary]") {
  auto rng = fresh_rng("prefix summary filter");
  const size_t capacity = 1024;
  PrefixSummary summary(16, capacity);
  std::set<uint64_t> held;
  auto fill_to = [&](size_t n) {
    while (held.size() < n) {
      const uint64_t k = rng();
      summary.add(&k, 1);
      held.insert(k);
    }
  };
  // The share of keys not held that pass, over fresh random keys.
  auto passing = [&] {
    size_t pass = 0, probes = 200000;
    for (size_t i = 0; i < probes; ++i) {
      const uint64_t k = rng();
      if (!held.count(k) && summary.filter().may_hold(k)) ++pass;
    }
    return double(pass) / double(probes);
  };
  auto none_missed = [&] {
    for (uint64_t k : held)
      if (!summary.filter().may_hold(k)) return false;
    return true;
  };
  fill_to(capacity / 4);
  CHECK(none_missed());
  const double quarter = passing();
  CHECK(quarter < 0.012);  // two bits per key in one word: ~0.5% at a quarter of capacity (one bit: 3%)
  fill_to(capacity);
  CHECK(none_missed());
  const double full = passing();
  CHECK(full < 0.08);  // ~5.5% (one bit: 12%)
  CHECK(full > quarter);
  // Evictions leave stale bits until the filter is rebuilt; keys still held are never turned away.
  for (int round = 0; round < 20; ++round) {
    summary.evict_oldest(100);
    const auto keys = summary.keys();
    held = std::set<uint64_t>(keys.begin(), keys.end());
    REQUIRE(none_missed());
    fill_to(capacity);
    REQUIRE(none_missed());
  }
  summary.clear();
  held.clear();
  CHECK(passing() == 0.0);
}

}  // namespace runtime_prefix_summary_tests
