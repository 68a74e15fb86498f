#include "runtime/prefix_summary.hpp"

#include <algorithm>

namespace tokenhost {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// One block's key from its parent's: FNV-1a over the parent key's and the tokens' bytes, then a
// 64-bit finalizer (splitmix64's) so that chains that differ late still spread over the whole key.
uint64_t block_key(uint64_t parent, const int32_t* tokens, uint32_t n) {
  uint64_t h = kFnvOffset;
  auto add = [&](uint64_t v, int bytes) {
    for (int b = 0; b < bytes; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * kFnvPrime;
  };
  add(parent, 8);
  for (uint32_t i = 0; i < n; ++i) add(uint32_t(tokens[i]), 4);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace

uint64_t cache_namespace(const std::string& api_key, const std::string& cache_salt) {
  uint64_t h = kFnvOffset;
  auto add = [&](const std::string& text) {
    for (unsigned char c : text) h = (h ^ c) * kFnvPrime;
  };
  add(api_key);
  h = (h ^ 0x100) * kFnvPrime;
  add(cache_salt);
  return h;
}

void extend_prefix_block_keys(uint64_t ns, const std::vector<int32_t>& tokens, uint32_t positions, uint32_t block_size,
                              std::vector<uint64_t>& keys) {
  if (block_size == 0) return;
  const size_t whole = std::min<size_t>(positions, tokens.size()) / block_size;
  while (keys.size() < whole) {
    const uint64_t parent = keys.empty() ? ns : keys.back();
    keys.push_back(block_key(parent, tokens.data() + keys.size() * block_size, block_size));
  }
}

namespace {
// log2 of the filter's 64-bit words for a capacity: 8 bits per key, from 1,024 bits (16 words) up.
unsigned filter_words_log2(size_t capacity) {
  unsigned log2 = 4;
  while (log2 < 14 && (size_t(64) << log2) < 8 * capacity) ++log2;
  return log2;
}
}  // namespace

PrefixSummary::PrefixSummary(uint32_t block_size, size_t capacity)
    : filter_shift_(64 - filter_words_log2(std::min(capacity, kMaxBlocks))),
      filter_words_(size_t(1) << filter_words_log2(std::min(capacity, kMaxBlocks))),
      filter_(new std::atomic<uint64_t>[filter_words_]),
      block_size_(block_size),
      capacity_(std::min(capacity, kMaxBlocks)) {
  for (size_t i = 0; i < filter_words_; ++i) filter_[i].store(0, std::memory_order_relaxed);
  // Versions of different summaries never meet (an engine rebuilt under its name starts far from its
  // predecessor's count): a head holding the old one's version asks the new one for its keys.
  static std::atomic<uint64_t> summaries{0};
  version_.store((summaries.fetch_add(1, std::memory_order_relaxed) + 1) << 32, std::memory_order_relaxed);
}

void PrefixSummary::set_bits_locked(uint64_t key) {
  const uint64_t h = key * 0x9e3779b97f4a7c15ull;
  filter_[h >> filter_shift_].fetch_or(filter().mask(h), std::memory_order_relaxed);
}

// A reader during the rebuild may miss a key held (a cache hit scored as none): a hint, never wrong
// about what is safe.
void PrefixSummary::rebuild_filter_locked() {
  for (size_t i = 0; i < filter_words_; ++i) filter_[i].store(0, std::memory_order_relaxed);
  for (uint64_t key : order_) set_bits_locked(key);
  stale_ = 0;
}

void PrefixSummary::add(const uint64_t* keys, size_t n) {
  std::lock_guard lock(mutex_);
  if (n > 0) version_.fetch_add(1, std::memory_order_release);
  for (size_t i = 0; i < n; ++i) {
    if (auto it = where_.find(keys[i]); it != where_.end()) {
      order_.splice(order_.end(), order_, it->second);
      continue;
    }
    where_.emplace(keys[i], order_.insert(order_.end(), keys[i]));
    set_bits_locked(keys[i]);
  }
  if (order_.size() > capacity_) drop_oldest_locked(order_.size() - capacity_);
}

void PrefixSummary::evict_oldest(uint64_t n) {
  std::lock_guard lock(mutex_);
  if (n > 0 && !order_.empty()) version_.fetch_add(1, std::memory_order_release);
  drop_oldest_locked(size_t(std::min<uint64_t>(n, order_.size())));
}

void PrefixSummary::drop_oldest_locked(size_t n) {
  for (size_t i = 0; i < n && !order_.empty(); ++i) {
    where_.erase(order_.front());
    order_.pop_front();
    ++stale_;
  }
  // Stale bits only cost lookups under the lock; rebuilt once they outnumber the keys held.
  if (stale_ > std::max<size_t>(order_.size(), 64)) rebuild_filter_locked();
}

void PrefixSummary::clear() {
  std::lock_guard lock(mutex_);
  version_.fetch_add(1, std::memory_order_release);
  order_.clear();
  where_.clear();
  rebuild_filter_locked();
}

void PrefixSummary::assign(const std::vector<uint64_t>& keys) {
  std::lock_guard lock(mutex_);
  version_.fetch_add(1, std::memory_order_release);
  order_.clear();
  where_.clear();
  const size_t first = keys.size() > capacity_ ? keys.size() - capacity_ : 0;  // the newest fit
  for (size_t i = first; i < keys.size(); ++i)
    if (!where_.count(keys[i])) where_.emplace(keys[i], order_.insert(order_.end(), keys[i]));
  rebuild_filter_locked();
}

std::vector<uint64_t> PrefixSummary::keys() const {
  std::lock_guard lock(mutex_);
  return std::vector<uint64_t>(order_.begin(), order_.end());
}

size_t PrefixSummary::leading_matches(const std::vector<uint64_t>& keys) const {
  if (keys.empty() || !filter().may_hold(keys[0])) return 0;
  std::lock_guard lock(mutex_);
  size_t n = 0;
  while (n < keys.size() && where_.count(keys[n])) ++n;
  return n;
}

size_t PrefixSummary::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

}  // namespace tokenhost
