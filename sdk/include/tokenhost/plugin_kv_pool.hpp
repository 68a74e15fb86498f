// tokenhost plugin SDK: header-only C++ helpers for kvcache plugins that keep paged pools in host
// memory (C++17).
//
// Like plugin.hpp it adds no ABI: it implements th_kvcache.h's block rules once, so that kvcache
// plugins differ only in what they add. What it gives:
//   - sdk::KvPoolSettings, read_kv_pool_settings(): the block_size and n_blocks every such plugin takes;
//   - sdk::kv_pool_check(): check() for such a plugin (model, kv dtype, device, the pools' memory);
//   - sdk::KvBlockPool: the K and V pools (host memory from mem_alloc, laid out
//     [layer][block][kv_head][token][head_dim] in the model's kv dtype; for q8_0 int8 elements, and f32
//     group scales in two more pools laid out [layer][block][kv_head][token][group]), a free list, a reference count
//     per block and a block table per sequence: seq_reserve with copy-on-write, seq_free, seq_fork,
//     seq_truncate, seq_drop_blocks (a sliding window's release of middle blocks), seq_blocks and exact
//     stats(). A subclass keeps blocks no sequence holds (a prefix
//     cache) through three hooks: retain() when a block's last reference goes, reclaim() when the free
//     list is empty, and before_write() before a block is written in place;
//   - sdk::kv_pool_vtable<Pool>(check): the th_kvcache_vtable of a plugin whose instances are such a
//     pool, every member through the pool's method (with prefix = true, also seq_lookup, seq_publish and
//     cache_flush through its lookup(), publish() and flush()).
#ifndef TOKENHOST_PLUGIN_KV_POOL_HPP
#define TOKENHOST_PLUGIN_KV_POOL_HPP

#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv.hpp>

#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace tokenhost::sdk {

// The configuration check() and create() validate (ranges and defaults: the plugin's plugin.toml).
struct KvPoolSettings {
  uint32_t block_size;
  uint32_t n_blocks;
};

inline KvPoolSettings read_kv_pool_settings(const th_config* config) {
  const Config cfg(config);
  return {uint32_t(cfg.require_int("block_size")), uint32_t(cfg.require_int("n_blocks"))};
}

// Bytes one head vector takes in the pools: its elements, and for q8_0 its group scales (f32).
inline int64_t kv_pool_vector_bytes(const th_model_info& m) {
  return int64_t(kv_vector_bytes(m.kv_dtype, m.head_dim)) + kv_scale_bytes(m.kv_dtype, m.head_dim, kv_q8_group(m.head_dim));
}

// a * b, or an error naming plugin when it does not fit in int64_t.
inline int64_t kv_pool_mul(int64_t a, int64_t b, const std::string& plugin) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) throw Error(TH_ERR_OUT_OF_MEMORY, plugin + ": the KV pool size overflows");
  return a * b;
}

// Why the pools cannot be laid out for model m (check() reports them all, create() the first).
inline std::vector<std::string> kv_pool_model_refusals(const th_model_info& m) {
  std::vector<std::string> why;
  if (m.n_layers == 0 || m.n_kv_heads == 0 || m.head_dim == 0) why.push_back("the model needs n_layers, n_kv_heads and head_dim > 0");
  if (kv_vector_bytes(m.kv_dtype, 1) == 0)
    why.push_back("keeps kv dtype f32, f16 or q8_0, the model's kv dtype is " + dtype_name(m.kv_dtype));
  return why;
}

// check() of a kvcache plugin whose pools lie in host memory: the settings, the model, the device (CPU
// only) and, where the device says how much memory it has, the size of the pools.
inline th_status kv_pool_check(const char* plugin, const th_check_query* query, th_error* err) {
  return guard(err, [&]() -> th_status {
    if (query == nullptr || query->model == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(plugin) + ": check() needs a model");
    const KvPoolSettings s = read_kv_pool_settings(query->config);
    const th_model_info& m = *query->model;
    th_status status = TH_OK;
    auto refuse = [&](const std::string& why) {
      set_error(err, std::string(plugin) + ": " + why);
      status = TH_ERR_UNSUPPORTED;
    };
    const auto model_problems = kv_pool_model_refusals(m);
    for (const std::string& why : model_problems) refuse(why);
    if (query->device != nullptr && query->device->kind != TH_DEVICE_CPU) refuse("keeps its pools in host memory: runs on the CPU only");
    // A pool the machine cannot hold is refused here, by `tokenhost check` too, rather than when the
    // server allocates it.
    if (model_problems.empty() && query->device != nullptr && query->device->memory_bytes > 0) {
      auto mul = [&](int64_t a, int64_t b) { return kv_pool_mul(a, b, plugin); };
      const int64_t pools = mul(2, mul(m.n_layers, mul(s.n_blocks, mul(m.n_kv_heads, mul(s.block_size, kv_pool_vector_bytes(m))))));
      if (uint64_t(pools) > query->device->memory_bytes)
        refuse("the K and V pools need " + std::to_string(pools) + " bytes (" + std::to_string(pools >> 20) + " MiB), more than the " +
               std::to_string(query->device->memory_bytes) + " bytes of memory of device " +
               (query->device->name != nullptr ? query->device->name : "cpu") + "; lower n_blocks or block_size");
    }
    return status;
  });
}

class KvBlockPool {
 public:
  // Reads the settings from args.config and the model from args.model; allocates and zeroes the pools.
  // plugin: the plugin's id, for messages.
  KvBlockPool(const th_create_args& args, const char* plugin)
      : plugin_(plugin),
        settings_(read_kv_pool_settings(args.config)),
        layout_(make_layout(*args.model)),
        k_(args.host_ctx, pool_bytes(), "K", plugin_),
        v_(args.host_ctx, pool_bytes(), "V", plugin_),
        k_scales_(args.host_ctx, scale_bytes(), "K scale", plugin_),
        v_scales_(args.host_ctx, scale_bytes(), "V scale", plugin_),
        refs_(settings_.n_blocks, 0) {
    layout_.k_base = k_.data();
    layout_.v_base = v_.data();
    layout_.k_scale_base = k_scales_.data();  // NULL for float dtypes
    layout_.v_scale_base = v_scales_.data();
    free_.reserve(settings_.n_blocks);
    for (uint32_t b = settings_.n_blocks; b-- > 0;) free_.push_back(int32_t(b));  // lowest id first
  }
  virtual ~KvBlockPool() = default;
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  const th_kv_layout& layout() const { return layout_; }
  uint32_t block_size() const { return settings_.block_size; }
  uint32_t n_blocks() const { return settings_.n_blocks; }
  const std::string& plugin() const { return plugin_; }

  // th_kvcache_vtable.seq_reserve: every fresh block (copies of shared blocks that will be written, then
  // growth) is counted first; when they are not there nothing changes.
  th_status reserve(uint64_t seq, uint32_t n_positions, uint32_t first_write) {
    const auto it = seqs_.find(seq);
    const size_t have = it == seqs_.end() ? 0 : it->second.size();
    const size_t want = blocks_for(n_positions);
    std::vector<size_t> copies;
    for (size_t j = 0; j < have && j < want; ++j)
      if (writes_into(j, n_positions, first_write) && refs_[size_t(it->second[j])] > 1) copies.push_back(j);
    const size_t fresh = copies.size() + (want > have ? want - have : 0);
    if (fresh > available()) {
      throw Error(TH_ERR_RESOURCE_EXHAUSTED, plugin_ + ": sequence " + std::to_string(seq) + " needs " + std::to_string(fresh) +
                                                 " free blocks, " + std::to_string(available()) + " are free");
    }
    std::vector<int32_t>& table = seqs_[seq];  // creates a new sequence
    table.reserve(want);
    for (size_t j = 0; j < have && j < want; ++j)  // written in place: its holder's alone
      if (writes_into(j, n_positions, first_write) && refs_[size_t(table[j])] == 1) before_write(table[j]);
    for (size_t j : copies) {
      const int32_t old = table[j];
      const int32_t block = take();
      copy_block(old, block);
      unref(old);
      table[j] = block;
    }
    while (table.size() < want) table.push_back(take());
    changed();
    return TH_OK;
  }

  void free_seq(uint64_t seq) {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) return;
    for (int32_t block : it->second) unref(block);
    seqs_.erase(it);
    forget(seq);
    changed();
  }

  // Keeps the blocks holding positions [0, n_positions); a shared block only loses this reference.
  th_status truncate(uint64_t seq, uint32_t n_positions) {
    std::vector<int32_t>& table = table_of(seq, "truncate of unknown sequence ");
    const size_t keep = blocks_for(n_positions);
    while (table.size() > keep) {
      unref(table.back());
      table.pop_back();
    }
    truncated(seq, n_positions);
    changed();
    return TH_OK;
  }

  // th_kvcache_vtable.seq_drop_blocks (ABI 1.6): blocks [first, first + n) leave the table and the later
  // ones move down. The host rewrites those (it re-rotates their keys): a shared one is copied, one the
  // sequence holds alone goes through before_write(). The copies are counted first, with the released
  // blocks back: when they are not there nothing changes.
  th_status drop(uint64_t seq, uint32_t first, uint32_t n) {
    std::vector<int32_t>& table = table_of(seq, "seq_drop_blocks of unknown sequence ");
    if (n == 0 || uint64_t(first) + n > table.size())
      throw Error(TH_ERR_INVALID_ARGUMENT, plugin_ + ": seq_drop_blocks of blocks [" + std::to_string(first) + ", " +
                                               std::to_string(uint64_t(first) + n) + ") of sequence " + std::to_string(seq) +
                                               ", which holds " + std::to_string(table.size()) + " blocks");
    size_t released = 0, copies = 0;
    for (size_t j = first; j < size_t(first) + n; ++j) released += refs_[size_t(table[j])] == 1 ? 1 : 0;
    for (size_t j = size_t(first) + n; j < table.size(); ++j) copies += refs_[size_t(table[j])] > 1 ? 1 : 0;
    if (copies > available() + released)
      throw Error(TH_ERR_RESOURCE_EXHAUSTED, plugin_ + ": seq_drop_blocks of sequence " + std::to_string(seq) + " copies " +
                                                 std::to_string(copies) + " shared blocks, " + std::to_string(available() + released) +
                                                 " are free");
    for (size_t j = first; j < size_t(first) + n; ++j) unref(table[j]);
    table.erase(table.begin() + first, table.begin() + first + n);
    for (size_t j = first; j < table.size(); ++j) {
      if (refs_[size_t(table[j])] == 1) {
        before_write(table[j]);
        continue;
      }
      const int32_t old = table[j];
      const int32_t block = take();
      copy_block(old, block);
      unref(old);
      table[j] = block;
    }
    dropped(seq);
    changed();
    return TH_OK;
  }

  th_status fork(uint64_t parent, uint64_t child) {
    const std::vector<int32_t> table = table_of(parent, "fork of unknown sequence ");  // a copy: insertion may rehash
    if (seqs_.count(child) != 0) throw Error(TH_ERR_INVALID_ARGUMENT, plugin_ + ": fork target " + std::to_string(child) + " already exists");
    for (int32_t block : table) ref(block);
    seqs_.emplace(child, table);
    changed();
    return TH_OK;
  }

  th_status blocks(uint64_t seq, const int32_t** out, uint32_t* n) {
    const std::vector<int32_t>& table = table_of(seq, "unknown sequence ");
    *out = table.data();
    *n = uint32_t(table.size());
    return TH_OK;
  }

  // used + free + cached == total; held counts a block once per sequence holding it.
  void stats(th_kv_stats* out) const {
    th_kv_stats s{};
    s.struct_size = sizeof(th_kv_stats);
    s.total_blocks = settings_.n_blocks;
    s.free_blocks = uint32_t(free_.size());
    s.cached_blocks = cached_;
    s.used_blocks = settings_.n_blocks - s.free_blocks - s.cached_blocks;
    s.shared_blocks = shared_;
    s.n_seqs = uint32_t(seqs_.size());
    for (const auto& [seq, table] : seqs_) s.held_blocks += uint32_t(table.size());
    s.evicted_blocks = evicted_;
    s.published_blocks = published_;
    // A caller built against an older header passes a shorter struct: fill only what it has.
    const uint32_t size = out->struct_size != 0 && out->struct_size < sizeof s ? out->struct_size : uint32_t(sizeof s);
    std::memcpy(out, &s, size);
    out->struct_size = size;
  }

 protected:
  // Hooks for a cache of blocks no sequence holds. retain(block): the block's last reference went;
  // true keeps it (the subclass then counts it in cached_ and gives it back through reclaim()), false
  // frees it. reclaim(): the free list is empty; a kept block taken back (its reference count 0, no
  // longer kept), or -1. before_write(block): block (held by one sequence) is about to be written in
  // place: content a cache keyed must leave the cache first. forget(seq): seq was freed.
  // truncated(seq, n): seq now holds positions [0, n) at most. dropped(seq): blocks left the middle of
  // seq's table (drop()): its positions no longer follow its tokens. changed(): after every change.
  // retain() returning true is for a prefix cache (th_kvcache_vtable.seq_lookup and seq_publish, ABI
  // 1.5): a kept block is held by no sequence, so stats() must count it in th_kv_stats.cached_blocks
  // (1.5) and reclaim() must give it back when the free list runs dry; a pool without a prefix cache
  // keeps nothing (the default), or its used + free + cached no longer add up to the pool.
  virtual bool retain(int32_t) { return false; }
  virtual int32_t reclaim() { return -1; }
  virtual void before_write(int32_t) {}
  virtual void forget(uint64_t) {}
  virtual void truncated(uint64_t, uint32_t) {}
  virtual void dropped(uint64_t) {}
  virtual void changed() {}

  size_t blocks_for(uint64_t positions) const { return size_t((positions + settings_.block_size - 1) / settings_.block_size); }
  // Blocks a reservation may take: the free ones and the kept ones reclaim() can give back.
  size_t available() const { return free_.size() + cached_; }
  uint32_t refs(int32_t block) const { return refs_[size_t(block)]; }
  std::vector<int32_t>* find_table(uint64_t seq) {
    auto it = seqs_.find(seq);
    return it == seqs_.end() ? nullptr : &it->second;
  }
  // Creates seq holding `table` (one more reference on each block; a kept block is the subclass's to
  // have taken out of its cache first: its count goes from 0 to 1).
  void adopt(uint64_t seq, const std::vector<int32_t>& table) {
    for (int32_t block : table) ref(block);
    seqs_[seq] = table;
  }
  void ref(int32_t block) {
    if (++refs_[size_t(block)] == 2) ++shared_;
  }
  void unref(int32_t block) {
    const uint32_t left = --refs_[size_t(block)];
    if (left == 1) --shared_;
    if (left == 0 && !retain(block)) free_.push_back(block);
  }
  // A kept block the subclass drops from its cache while no sequence holds it: free again.
  void release_kept(int32_t block) { free_.push_back(block); }

  uint32_t cached_ = 0;       // blocks kept by the subclass, held by no sequence
  uint64_t evicted_ = 0;      // kept blocks taken back by reclaim() (the subclass counts)
  uint64_t published_ = 0;    // blocks the subclass added to its cache

 private:
  // Host memory from mem_alloc, freed on destruction (also when a later member's constructor throws).
  class Pool {
   public:
    Pool(th_host_ctx* ctx, size_t bytes, const char* what, const std::string& plugin) : ctx_(ctx) {
      if (bytes == 0) return;  // a scale pool of a float cache
      const th_status s = host().mem_alloc(ctx, TH_DEVICE_CPU, 0, bytes, 64, &data_, nullptr);
      if (s != TH_OK || data_ == nullptr)
        throw Error(s != TH_OK ? s : TH_ERR_OUT_OF_MEMORY,
                    plugin + ": cannot allocate the " + what + " pool (" + std::to_string(bytes) + " bytes)");
      std::memset(data_, 0, bytes);
    }
    ~Pool() {
      if (data_ != nullptr) host().mem_free(ctx_, data_);
    }
    Pool(const Pool&) = delete;
    Pool& operator=(const Pool&) = delete;
    char* data() const { return static_cast<char*>(data_); }

   private:
    th_host_ctx* ctx_;
    void* data_ = nullptr;
  };

  th_kv_layout make_layout(const th_model_info& m) const {
    if (const auto why = kv_pool_model_refusals(m); !why.empty()) throw Error(TH_ERR_UNSUPPORTED, plugin_ + ": " + why.front());
    auto mul = [&](int64_t a, int64_t b) { return kv_pool_mul(a, b, plugin_); };
    th_kv_layout l{};
    l.struct_size = sizeof(th_kv_layout);
    l.block_size = settings_.block_size;
    l.n_blocks = settings_.n_blocks;
    l.n_layers = m.n_layers;
    l.n_kv_heads = m.n_kv_heads;
    l.head_dim = m.head_dim;
    l.dtype = m.kv_dtype;
    l.token_stride = kv_vector_bytes(m.kv_dtype, m.head_dim);
    l.head_stride = mul(settings_.block_size, l.token_stride);
    l.block_stride = mul(m.n_kv_heads, l.head_stride);
    l.layer_stride = mul(settings_.n_blocks, l.block_stride);
    mul(m.n_layers, l.layer_stride);  // the pool size must fit too
    if (m.kv_dtype == TH_DTYPE_Q8_0) {  // the scales: [layer][block][kv_head][token][group], f32
      l.quant_group = kv_q8_group(m.head_dim);
      l.scale_token_stride = kv_scale_bytes(m.kv_dtype, m.head_dim, l.quant_group);
      l.scale_head_stride = mul(settings_.block_size, l.scale_token_stride);
      l.scale_block_stride = mul(m.n_kv_heads, l.scale_head_stride);
      l.scale_layer_stride = mul(settings_.n_blocks, l.scale_block_stride);
      mul(m.n_layers, l.scale_layer_stride);
    }
    l.device = TH_DEVICE_CPU;          // mem_alloc'd host memory (kv_pool_check refuses other devices)
    l.device_index = 0;
    return l;
  }
  size_t pool_bytes() const { return size_t(layout_.n_layers) * size_t(layout_.layer_stride); }
  size_t scale_bytes() const { return size_t(layout_.n_layers) * size_t(layout_.scale_layer_stride); }

  std::vector<int32_t>& table_of(uint64_t seq, const char* what) {
    auto it = seqs_.find(seq);
    if (it == seqs_.end()) throw Error(TH_ERR_NOT_FOUND, plugin_ + ": " + what + std::to_string(seq));
    return it->second;
  }

  // Whether block j of a table holds a position in [first_write, n_positions).
  bool writes_into(size_t j, uint32_t n_positions, uint32_t first_write) const {
    const uint64_t begin = uint64_t(j) * settings_.block_size;
    const uint64_t end = begin + settings_.block_size;
    return begin < n_positions && end > first_write && first_write < n_positions;
  }

  int32_t take() {
    int32_t block;
    if (!free_.empty()) {
      block = free_.back();
      free_.pop_back();
    } else {
      block = reclaim();  // reserve() counted it in available()
      if (block < 0) throw Error(TH_ERR_INTERNAL, plugin_ + ": no block to reclaim");
    }
    refs_[size_t(block)] = 1;
    return block;
  }

  void copy_block(int32_t from, int32_t to) {
    for (uint32_t l = 0; l < layout_.n_layers; ++l) {
      for (char* base : {k_.data(), v_.data()}) {
        char* layer = base + int64_t(l) * layout_.layer_stride;
        std::memcpy(layer + int64_t(to) * layout_.block_stride, layer + int64_t(from) * layout_.block_stride, size_t(layout_.block_stride));
      }
      for (char* base : {k_scales_.data(), v_scales_.data()}) {  // q8_0: the block's scales go with it
        if (base == nullptr) continue;
        char* layer = base + int64_t(l) * layout_.scale_layer_stride;
        std::memcpy(layer + int64_t(to) * layout_.scale_block_stride, layer + int64_t(from) * layout_.scale_block_stride,
                    size_t(layout_.scale_block_stride));
      }
    }
  }

  std::string plugin_;
  KvPoolSettings settings_;
  th_kv_layout layout_;
  Pool k_;
  Pool v_;
  Pool k_scales_;  // q8_0: the group scales (empty for float dtypes)
  Pool v_scales_;
  std::vector<uint32_t> refs_;  // per block
  std::vector<int32_t> free_;   // stack of free blocks
  uint32_t shared_ = 0;         // blocks with refs > 1
  std::unordered_map<uint64_t, std::vector<int32_t>> seqs_;
};

// The vtable members of kv_pool_vtable (class templates: a member is compiled only where it is used).
template <class Pool>
struct KvPoolMembers {
  static th_status get_layout(th_instance* i, const th_kv_layout** out, th_error* err) {
    return guard(err, [&] { *out = &self<Pool>(i).layout(); });
  }
  static th_status seq_reserve(th_instance* i, uint64_t seq, uint32_t n_positions, uint32_t first_write, th_error* err) {
    return guard(err, [&] { return self<Pool>(i).reserve(seq, n_positions, first_write); });
  }
  static void seq_free(th_instance* i, uint64_t seq) { self<Pool>(i).free_seq(seq); }
  static th_status seq_fork(th_instance* i, uint64_t parent, uint64_t child, th_error* err) {
    return guard(err, [&] { return self<Pool>(i).fork(parent, child); });
  }
  static th_status seq_blocks(th_instance* i, uint64_t seq, const int32_t** blocks, uint32_t* n_blocks, th_error* err) {
    return guard(err, [&] { return self<Pool>(i).blocks(seq, blocks, n_blocks); });
  }
  static void stats(th_instance* i, th_kv_stats* out) { self<Pool>(i).stats(out); }
  static th_status seq_truncate(th_instance* i, uint64_t seq, uint32_t n_positions, th_error* err) {
    return guard(err, [&] { return self<Pool>(i).truncate(seq, n_positions); });
  }
  static th_status seq_drop_blocks(th_instance* i, uint64_t seq, uint32_t first_block, uint32_t n_blocks, th_error* err) {
    return guard(err, [&] { return self<Pool>(i).drop(seq, first_block, n_blocks); });
  }
  static th_status seq_lookup(th_instance* i, uint64_t seq, uint64_t salt, const int32_t* tokens, uint32_t n_tokens, uint32_t* n_cached,
                              th_error* err) {
    return guard(err, [&] { return self<Pool>(i).lookup(seq, salt, tokens, n_tokens, n_cached); });
  }
  static th_status seq_publish(th_instance* i, uint64_t seq, uint32_t first_position, const int32_t* tokens, uint32_t n_tokens,
                               th_error* err) {
    return guard(err, [&] { return self<Pool>(i).publish(seq, first_position, tokens, n_tokens); });
  }
  static void cache_flush(th_instance* i) { self<Pool>(i).flush(); }
};

template <class Pool, bool prefix = false>
th_kvcache_vtable kv_pool_vtable(th_status (*check)(const th_check_query*, th_error*)) {
  using M = KvPoolMembers<Pool>;
  th_kvcache_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = create_instance<Pool>;
  vt.destroy = destroy_instance<Pool>;
  vt.check = check;
  vt.get_layout = M::get_layout;
  vt.seq_reserve = M::seq_reserve;
  vt.seq_free = M::seq_free;
  vt.seq_fork = M::seq_fork;
  vt.seq_blocks = M::seq_blocks;
  vt.stats = M::stats;
  vt.seq_truncate = M::seq_truncate;
  vt.seq_drop_blocks = M::seq_drop_blocks;
  if constexpr (prefix) {  // all three or none (th_kvcache.h)
    vt.seq_lookup = M::seq_lookup;
    vt.seq_publish = M::seq_publish;
    vt.cache_flush = M::cache_flush;
  }
  return vt;
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_KV_POOL_HPP
