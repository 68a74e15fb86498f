// What an engine's prefix cache likely holds, for cache-aware routing: the host's own 64-bit keys of the
// whole blocks the engine published (a chain over the request's cache namespace and every token up to
// the block's end), bounded, least recently used dropped first. The engine actor writes it after its
// steps; the router actor reads it for each request (a mutex between them). It mirrors the kvcache
// plugin's cache without asking it: blocks are added when published, touched when their sequence ends
// (when the plugin's least-recently-used order starts counting them), dropped oldest first as the plugin
// reports evictions (th_kv_stats.evicted_blocks) and all at once on a flush. A plugin that evicts in
// another order makes the summary approximate, never wrong about what is safe: the router only scores.
// The router asks every candidate's summary for every request, and most hold none of its first block:
// a bit filter over the keys held (Filter, read without the lock) answers those at the cost of one
// load, so a head choosing among a thousand engines pays microseconds, not a lock and a hash lookup
// each (bench/RESULTS.md, the head at fleet scale).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tokenhost {

// The prefix cache's namespace for a request: requests share cached KV only when their API key and
// cache_salt are both equal (FNV-1a over the key, a separator no key holds, the salt).
uint64_t cache_namespace(const std::string& api_key, const std::string& cache_salt);

// Extends keys (those of the first keys.size() whole blocks of tokens) to the whole blocks among the
// first `positions` tokens. Each key is chained over the namespace and every token before the block's
// end: the same tokens give the same keys in every engine with that block size.
void extend_prefix_block_keys(uint64_t ns, const std::vector<int32_t>& tokens, uint32_t positions, uint32_t block_size,
                              std::vector<uint64_t>& keys);

class PrefixSummary {
 public:
  // At most `capacity` keys (the engine's KV pool cannot cache more blocks than it has), and never more
  // than kMaxBlocks.
  static constexpr size_t kMaxBlocks = 1 << 16;
  PrefixSummary(uint32_t block_size, size_t capacity);

  uint32_t block_size() const { return block_size_; }
  size_t capacity() const { return capacity_; }

  // Keys the engine published, newest last; a key already held becomes the most recent.
  void add(const uint64_t* keys, size_t n);
  void touch(const std::vector<uint64_t>& keys) { add(keys.data(), keys.size()); }
  // The plugin evicted n blocks: the n least recently used keys go.
  void evict_oldest(uint64_t n);
  void clear();
  // Replaces what it holds with keys, oldest first (a remote engine's summary as its node sent it).
  void assign(const std::vector<uint64_t>& keys);

  // The keys held, least recently used first (what a worker sends its heads).
  std::vector<uint64_t> keys() const;
  // Counts every change (keys added, touched, dropped, cleared): a head asks for the keys again only
  // when the version it has is not this one.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

  // How many of keys, from the first, the summary holds (it stops at the first it does not).
  size_t leading_matches(const std::vector<uint64_t>& keys) const;
  size_t size() const;

  // The filter over the keys held, as the router reads it for each candidate without touching the
  // summary itself: a key sets two bits of one 64-bit word (8 bits per key the summary may hold, a
  // power of two from 1,024; a key it does not hold passes for about one in 20 at full capacity, one in
  // 270 at a quarter), so a test is one load. A key dropped leaves its bits (another key may share them)
  // and counts as stale until the filter is rebuilt from the keys held. Its words are fixed for the
  // summary's life, so a view stays valid as long as the summary.
  struct Filter {
    const std::atomic<uint64_t>* words = nullptr;
    unsigned shift = 64;  // a key's word: its hash's top (64 - shift) bits
    // Whether the summary may hold key (false: surely not).
    bool may_hold(uint64_t key) const {
      const uint64_t h = key * 0x9e3779b97f4a7c15ull, m = mask(h);
      return (words[h >> shift].load(std::memory_order_relaxed) & m) == m;
    }
    // Brings into cache the word may_hold(key) reads.
    void prefetch(uint64_t key) const { __builtin_prefetch(&words[(key * 0x9e3779b97f4a7c15ull) >> shift]); }
    // The key's two bits in its word, from the hash bits just below the word's index.
    uint64_t mask(uint64_t h) const { return (uint64_t(1) << ((h >> (shift - 6)) & 63)) | (uint64_t(1) << ((h >> (shift - 12)) & 63)); }
  };
  Filter filter() const { return {filter_.get(), filter_shift_}; }

 private:
  void drop_oldest_locked(size_t n);
  const unsigned filter_shift_;
  const size_t filter_words_;
  void set_bits_locked(uint64_t key);
  void rebuild_filter_locked();
  std::unique_ptr<std::atomic<uint64_t>[]> filter_;
  size_t stale_ = 0;
  const uint32_t block_size_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::atomic<uint64_t> version_{0};
  std::list<uint64_t> order_;  // least recently used first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

}  // namespace tokenhost
