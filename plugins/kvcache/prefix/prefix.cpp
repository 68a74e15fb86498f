// kvcache.prefix: kvcache.paged's blocks (the SDK's KvBlockPool) with a prefix cache.
//
// A full block a sequence has computed is published under a key: a hash chain over the salt, every
// block's tokens before it and its own (a hash match is checked against the stored tokens and the
// parent key, so a collision is a miss, never wrong keys and values). A new sequence (seq_lookup)
// adopts the longest chain of cached blocks its prompt begins with, by reference. A block whose last
// holder goes stays cached; when the free list is empty the least recently used cached block no
// sequence holds is taken back, one without cached children first (a chain loses its leaves before
// its root, which later prompts still share). Why a hash chain rather than a radix tree: the block is
// the unit of sharing either way (positions in a block are reused whole), a chain needs one map lookup
// per block, and it keeps no tree to rebalance when blocks go; see README.md.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv_pool.hpp>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;

constexpr const char* kId = TH_PLUGIN_ID;  // plugin.toml's id (tokenhost_add_plugin)

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Keys are never 0 (0 marks a block that is not cached).
uint64_t root_key(uint64_t salt) { return mix(salt ^ 0x7072656669780000ull) | 1; }
uint64_t block_key(uint64_t parent, const int32_t* tokens, uint32_t n) {
  uint64_t h = mix(parent);
  for (uint32_t i = 0; i < n; ++i) h = mix(h ^ uint32_t(tokens[i]));
  return h == 0 ? 1 : h;
}

th_status check(const th_check_query* query, th_error* err) { return sdk::kv_pool_check(kId, query, err); }

class Prefix : public sdk::KvBlockPool {
 public:
  explicit Prefix(const th_create_args& args) : KvBlockPool(args, kId), key_of_block_(n_blocks(), 0) {}

  th_status lookup(uint64_t seq, uint64_t salt, const int32_t* tokens, uint32_t n, uint32_t* n_cached) {
    if (n_cached == nullptr || (tokens == nullptr && n > 0)) throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": seq_lookup got a NULL argument");
    if (find_table(seq) != nullptr)
      throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": seq_lookup of sequence " + std::to_string(seq) + ", which exists");
    const uint32_t bs = block_size();
    SeqCache sc;
    sc.salt = salt;
    std::vector<int32_t> held;
    uint64_t parent = root_key(salt);
    for (uint32_t j = 0; uint64_t(j + 1) * bs <= n; ++j) {
      const int32_t* block_tokens = tokens + size_t(j) * bs;
      const auto it = entries_.find(block_key(parent, block_tokens, bs));
      if (it == entries_.end() || it->second.parent != parent || !std::equal(block_tokens, block_tokens + bs, it->second.tokens.begin())) break;
      held.push_back(it->second.block);
      sc.keys.push_back(it->first);
      parent = it->first;
    }
    // The last prompt token is computed (its logits give the first token): a prompt cached whole
    // recomputes its last block rather than writing into a block the cache shares.
    if (!held.empty() && uint64_t(held.size()) * bs >= n) held.pop_back(), sc.keys.pop_back();
    for (int32_t block : held) {
      Entry& e = entries_.at(key_of_block_[size_t(block)]);
      if (refs(block) == 0) kept_.erase({e.stamp, block}), leaves_.erase({e.stamp, block}), --cached_;  // held again: pinned
      e.stamp = ++clock_;
    }
    adopt(seq, held);
    sc.tokens.assign(tokens, tokens + held.size() * bs);
    *n_cached = uint32_t(sc.tokens.size());
    caches_[seq] = std::move(sc);
    return TH_OK;
  }

  th_status publish(uint64_t seq, uint32_t first, const int32_t* tokens, uint32_t n) {
    const auto it = caches_.find(seq);
    if (it == caches_.end()) {
      if (find_table(seq) != nullptr) return TH_OK;  // made by seq_reserve: not in the cache
      throw sdk::Error(TH_ERR_NOT_FOUND, std::string(kId) + ": seq_publish of unknown sequence " + std::to_string(seq));
    }
    SeqCache& sc = it->second;
    if (first != sc.tokens.size())
      throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": seq_publish of sequence " + std::to_string(seq) + " from position " +
                                                    std::to_string(first) + "; it has published " + std::to_string(sc.tokens.size()));
    if (tokens == nullptr && n > 0) throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": seq_publish got NULL tokens");
    const std::vector<int32_t>& table = *find_table(seq);
    const uint32_t bs = block_size();
    if (blocks_for(uint64_t(first) + n) > table.size())
      throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": seq_publish of positions through " + std::to_string(uint64_t(first) + n) +
                                                    " of sequence " + std::to_string(seq) + ", which holds " + std::to_string(table.size()) + " blocks");
    sc.tokens.insert(sc.tokens.end(), tokens, tokens + n);
    while (uint64_t(sc.keys.size() + 1) * bs <= sc.tokens.size()) {
      const size_t j = sc.keys.size();
      const uint64_t parent = j == 0 ? root_key(sc.salt) : sc.keys.back();
      const int32_t* block_tokens = sc.tokens.data() + j * bs;
      const uint64_t key = block_key(parent, block_tokens, bs);
      sc.keys.push_back(key);
      const int32_t block = table[j];
      if (entries_.count(key) != 0 || key_of_block_[size_t(block)] != 0) continue;  // cached already (or a collision)
      Entry e{block, parent, std::vector<int32_t>(block_tokens, block_tokens + bs), 0, ++clock_};
      if (auto p = entries_.find(parent); p != entries_.end() && p->second.children++ == 0)
        leaves_.erase({p->second.stamp, p->second.block});  // kept or not: it has a child now
      entries_.emplace(key, std::move(e));
      key_of_block_[size_t(block)] = key;
      ++published_;
    }
    return TH_OK;
  }

  void flush() {
    for (auto& [key, e] : entries_) {
      key_of_block_[size_t(e.block)] = 0;
      if (refs(e.block) == 0) release_kept(e.block);
    }
    entries_.clear();
    kept_.clear();
    leaves_.clear();
    cached_ = 0;
    changed();
  }

 private:
  struct Entry {
    int32_t block;
    uint64_t parent;              // the key of the block before it (root_key(salt) for the first)
    std::vector<int32_t> tokens;  // its block_size tokens
    uint32_t children;            // cached entries whose parent it is
    uint64_t stamp;               // last lookup or publish
  };
  // What seq_lookup and seq_publish know of a sequence: its salt, the tokens of the positions looked up
  // or published, and the key of each full block among them.
  struct SeqCache {
    uint64_t salt = 0;
    std::vector<int32_t> tokens;
    std::vector<uint64_t> keys;
  };

  bool retain(int32_t block) override {
    const uint64_t key = key_of_block_[size_t(block)];
    if (key == 0) return false;
    const Entry& e = entries_.at(key);
    kept_.insert({e.stamp, block});
    if (e.children == 0) leaves_.insert({e.stamp, block});
    ++cached_;
    return true;
  }

  // The least recently used kept block without cached children, else the least recently used one.
  int32_t reclaim() override {
    if (kept_.empty()) return -1;
    const auto victim = leaves_.empty() ? *kept_.begin() : *leaves_.begin();
    const int32_t block = victim.second;
    kept_.erase(victim);
    leaves_.erase(victim);
    --cached_;
    ++evicted_;
    uncache(block);
    return block;
  }

  // Content about to change in place: the block leaves the cache first.
  void before_write(int32_t block) override {
    if (key_of_block_[size_t(block)] != 0) uncache(block);
  }

  void forget(uint64_t seq) override { caches_.erase(seq); }
  // A sliding window released blocks of seq: it publishes nothing more (its positions are no longer a
  // prefix of its tokens); what it published stays cached.
  void dropped(uint64_t seq) override { caches_.erase(seq); }

  void truncated(uint64_t seq, uint32_t n) override {
    const auto it = caches_.find(seq);
    if (it == caches_.end() || it->second.tokens.size() <= n) return;
    it->second.tokens.resize(n);
    it->second.keys.resize(std::min<size_t>(it->second.keys.size(), n / block_size()));
  }

  void uncache(int32_t block) {
    const uint64_t key = key_of_block_[size_t(block)];
    const auto it = entries_.find(key);
    if (auto p = entries_.find(it->second.parent); p != entries_.end() && --p->second.children == 0 && refs(p->second.block) == 0)
      leaves_.insert({p->second.stamp, p->second.block});  // a kept block whose last cached child went
    entries_.erase(it);
    key_of_block_[size_t(block)] = 0;
  }

  std::unordered_map<uint64_t, Entry> entries_;     // key -> cached block
  std::vector<uint64_t> key_of_block_;              // per block: its key, 0 when not cached
  std::set<std::pair<uint64_t, int32_t>> kept_;     // (stamp, block): cached, held by no sequence
  std::set<std::pair<uint64_t, int32_t>> leaves_;   // those of kept_ without cached children
  std::unordered_map<uint64_t, SeqCache> caches_;   // sequences made by seq_lookup
  uint64_t clock_ = 0;
};

const th_kvcache_vtable kVtable = sdk::kv_pool_vtable<Prefix, /*prefix=*/true>(check);

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_KVCACHE, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
