// kvcache.paged: a paged KV block manager (vLLM style) in host memory.
//
// One K pool and one V pool laid out [layer][block][kv_head][token][head_dim] in the model's kv dtype
// (th_model_info.kv_dtype: f32 or f16, which the engine chooses), a free list,
// a reference count per block, and a block table per sequence. Forked sequences share blocks; a
// shared block is copied the first time a sequence reserves a write into it (copy-on-write).
// Truncation (speculative decoding's rollback) gives back the blocks past the kept positions.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv.hpp>

#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

// The configuration both check() and create() validate.
struct Settings {
  uint32_t block_size;
  uint32_t n_blocks;
};

Settings read_settings(const th_config* config) {
  const sdk::Config cfg(config);
  Settings s{};
  s.block_size = uint32_t(cfg.require_int("block_size"));  // defaults and ranges: plugin.toml
  s.n_blocks = uint32_t(cfg.require_int("n_blocks"));
  return s;
}

// a * b, or an error when it does not fit in int64_t.
int64_t mul(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) {
    throw Error(TH_ERR_OUT_OF_MEMORY, "kvcache.paged: the KV pool size overflows");
  }
  return a * b;
}

// Why the pools cannot be laid out for model m (check() reports them all, create() the first).
std::vector<std::string> model_refusals(const th_model_info& m) {
  std::vector<std::string> why;
  if (m.n_layers == 0 || m.n_kv_heads == 0 || m.head_dim == 0) {
    why.push_back("the model needs n_layers, n_kv_heads and head_dim > 0");
  }
  if (sdk::kv_element_bytes(m.kv_dtype) == 0) {
    why.push_back("keeps kv dtype f32 or f16, the model's kv dtype is " + sdk::dtype_name(m.kv_dtype));
  }
  return why;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr || query->model == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "kvcache.paged: check() needs a model");
    }
    read_settings(query->config);
    const th_model_info& m = *query->model;
    th_status status = TH_OK;
    auto refuse = [&](const std::string& why) {
      sdk::set_error(err, "kvcache.paged: " + why);
      status = TH_ERR_UNSUPPORTED;
    };
    const auto model_problems = model_refusals(m);
    for (const std::string& why : model_problems) refuse(why);
    if (query->device != nullptr && query->device->kind != TH_DEVICE_CPU) {
      refuse("keeps its pools in host memory: runs on the CPU only");
    }
    // A pool the machine cannot hold is refused here, by `tokenhost check` too, rather than when the
    // server allocates it.
    if (model_problems.empty() && query->device != nullptr && query->device->memory_bytes > 0) {
      const Settings s = read_settings(query->config);
      const int64_t pools = mul(2, mul(m.n_layers, mul(s.n_blocks, mul(m.n_kv_heads, mul(s.block_size, mul(m.head_dim, sdk::kv_element_bytes(m.kv_dtype)))))));
      if (uint64_t(pools) > query->device->memory_bytes)
        refuse("the K and V pools need " + std::to_string(pools) + " bytes (" + std::to_string(pools >> 20) + " MiB), more than the " +
               std::to_string(query->device->memory_bytes) + " bytes of memory of device " +
               (query->device->name != nullptr ? query->device->name : "cpu") + "; lower n_blocks or block_size");
    }
    return status;
  });
}

// Host memory from mem_alloc, freed on destruction (also when a later member's constructor throws).
class Pool {
 public:
  Pool(th_host_ctx* ctx, size_t bytes, const char* what) : ctx_(ctx) {
    const th_status s = sdk::host().mem_alloc(ctx, TH_DEVICE_CPU, 0, bytes, 64, &data_, nullptr);
    if (s != TH_OK || data_ == nullptr) {
      throw Error(s != TH_OK ? s : TH_ERR_OUT_OF_MEMORY,
                  std::string("kvcache.paged: cannot allocate the ") + what + " pool (" +
                      std::to_string(bytes) + " bytes)");
    }
    std::memset(data_, 0, bytes);
  }
  ~Pool() { sdk::host().mem_free(ctx_, data_); }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  char* data() const { return static_cast<char*>(data_); }

 private:
  th_host_ctx* ctx_;
  void* data_ = nullptr;
};

th_kv_layout make_layout(const th_create_args& args, const Settings& s) {
  const th_model_info& m = *args.model;
  if (const auto why = model_refusals(m); !why.empty()) throw Error(TH_ERR_UNSUPPORTED, "kvcache.paged: " + why.front());
  const uint32_t element_bytes = sdk::kv_element_bytes(m.kv_dtype);
  th_kv_layout l{};
  l.struct_size = sizeof(th_kv_layout);
  l.block_size = s.block_size;
  l.n_blocks = s.n_blocks;
  l.n_layers = m.n_layers;
  l.n_kv_heads = m.n_kv_heads;
  l.head_dim = m.head_dim;
  l.dtype = m.kv_dtype;
  l.token_stride = mul(m.head_dim, element_bytes);
  l.head_stride = mul(s.block_size, l.token_stride);
  l.block_stride = mul(m.n_kv_heads, l.head_stride);
  l.layer_stride = mul(s.n_blocks, l.block_stride);
  mul(m.n_layers, l.layer_stride);  // the pool size must fit too
  l.device = TH_DEVICE_CPU;          // mem_alloc'd host memory (check() refuses other devices)
  l.device_index = 0;
  return l;
}

class Paged {
 public:
  explicit Paged(const th_create_args& args)
      : settings_(read_settings(args.config)),
        layout_(make_layout(args, settings_)),
        k_(args.host_ctx, pool_bytes(), "K"),
        v_(args.host_ctx, pool_bytes(), "V"),
        refs_(settings_.n_blocks, 0) {
    layout_.k_base = k_.data();
    layout_.v_base = v_.data();
    free_.reserve(settings_.n_blocks);
    for (uint32_t b = settings_.n_blocks; b-- > 0;) free_.push_back(int32_t(b));  // lowest id first
    th_metric_desc desc{};
    desc.struct_size = sizeof(th_metric_desc);
    desc.type = TH_METRIC_GAUGE;
    desc.name = "kv_blocks_used";
    desc.help = "KV cache blocks referenced by at least one sequence";
    if (sdk::host().metric_create(args.host_ctx, &desc, &used_metric_, nullptr) != TH_OK) {
      used_metric_ = nullptr;
      sdk::log(args.host_ctx, TH_LOG_DEBUG, "kvcache.paged: cannot create the kv_blocks_used metric");
    }
    publish();
  }

  const th_kv_layout& layout() const { return layout_; }

  th_status reserve(uint64_t seq, uint32_t n_positions, uint32_t first_write) {
    const auto it = seqs_.find(seq);
    const size_t have = it == seqs_.end() ? 0 : it->second.size();
    const size_t want = (size_t(n_positions) + settings_.block_size - 1) / settings_.block_size;
    // Count every fresh block first: copies of shared blocks that will be written, then growth.
    std::vector<size_t> copies;
    for (size_t j = 0; j < have && j < want; ++j) {
      if (writes_into(j, n_positions, first_write) && refs_[size_t(it->second[j])] > 1) copies.push_back(j);
    }
    const size_t fresh = copies.size() + (want > have ? want - have : 0);
    if (fresh > free_.size()) {
      throw Error(TH_ERR_RESOURCE_EXHAUSTED,
                  "kvcache.paged: sequence " + std::to_string(seq) + " needs " + std::to_string(fresh) +
                      " free blocks, " + std::to_string(free_.size()) + " are free");
    }
    std::vector<int32_t>& table = seqs_[seq];  // creates a new sequence
    table.reserve(want);
    for (size_t j : copies) {
      const int32_t old = table[j];
      const int32_t block = take();
      copy_block(old, block);
      unref(old);
      table[j] = block;
    }
    while (table.size() < want) table.push_back(take());
    publish();
    return TH_OK;
  }

  void free_seq(uint64_t seq) {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) return;
    for (int32_t block : it->second) unref(block);
    seqs_.erase(it);
    publish();
  }

  // Keeps the blocks holding positions [0, n_positions); a shared block only loses this reference.
  th_status truncate(uint64_t seq, uint32_t n_positions) {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) {
      throw Error(TH_ERR_NOT_FOUND, "kvcache.paged: truncate of unknown sequence " + std::to_string(seq));
    }
    std::vector<int32_t>& table = it->second;
    const size_t keep = (size_t(n_positions) + settings_.block_size - 1) / settings_.block_size;
    while (table.size() > keep) {
      unref(table.back());
      table.pop_back();
    }
    publish();
    return TH_OK;
  }
  th_status fork(uint64_t parent, uint64_t child) {
    const auto it = seqs_.find(parent);
    if (it == seqs_.end()) {
      throw Error(TH_ERR_NOT_FOUND, "kvcache.paged: fork of unknown sequence " + std::to_string(parent));
    }
    if (seqs_.count(child) != 0) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "kvcache.paged: fork target " + std::to_string(child) +
                                               " already exists");
    }
    std::vector<int32_t> table = it->second;  // copy before inserting: insertion may rehash
    for (int32_t block : table) ref(block);
    seqs_.emplace(child, std::move(table));
    publish();
    return TH_OK;
  }

  th_status blocks(uint64_t seq, const int32_t** out, uint32_t* n) const {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) {
      throw Error(TH_ERR_NOT_FOUND, "kvcache.paged: unknown sequence " + std::to_string(seq));
    }
    *out = it->second.data();
    *n = uint32_t(it->second.size());
    return TH_OK;
  }

  void stats(th_kv_stats* out) const {
    out->struct_size = sizeof(th_kv_stats);
    out->total_blocks = settings_.n_blocks;
    out->free_blocks = uint32_t(free_.size());
    out->used_blocks = settings_.n_blocks - out->free_blocks;
    out->shared_blocks = shared_;
    out->n_seqs = uint32_t(seqs_.size());
  }

 private:
  size_t pool_bytes() const { return size_t(layout_.n_layers) * size_t(layout_.layer_stride); }

  // Whether block j of a table holds a position in [first_write, n_positions).
  bool writes_into(size_t j, uint32_t n_positions, uint32_t first_write) const {
    const uint64_t begin = uint64_t(j) * settings_.block_size;
    const uint64_t end = begin + settings_.block_size;
    return begin < n_positions && end > first_write && first_write < n_positions;
  }

  int32_t take() {
    const int32_t block = free_.back();
    free_.pop_back();
    refs_[size_t(block)] = 1;
    return block;
  }
  void ref(int32_t block) {
    if (++refs_[size_t(block)] == 2) ++shared_;
  }
  void unref(int32_t block) {
    const uint32_t left = --refs_[size_t(block)];
    if (left == 1) --shared_;
    if (left == 0) free_.push_back(block);
  }

  void copy_block(int32_t from, int32_t to) {
    for (uint32_t l = 0; l < layout_.n_layers; ++l) {
      for (char* base : {k_.data(), v_.data()}) {
        char* layer = base + int64_t(l) * layout_.layer_stride;
        std::memcpy(layer + int64_t(to) * layout_.block_stride, layer + int64_t(from) * layout_.block_stride,
                    size_t(layout_.block_stride));
      }
    }
  }

  void publish() {
    if (used_metric_ != nullptr) {
      sdk::host().metric_set(used_metric_, nullptr, double(settings_.n_blocks - free_.size()));
    }
  }

  Settings settings_;
  th_kv_layout layout_;
  Pool k_;
  Pool v_;
  std::vector<uint32_t> refs_;  // per block
  std::vector<int32_t> free_;   // stack of free blocks
  uint32_t shared_ = 0;         // blocks with refs > 1
  std::unordered_map<uint64_t, std::vector<int32_t>> seqs_;
  th_metric* used_metric_ = nullptr;
};

Paged& self(th_instance* instance) { return sdk::self<Paged>(instance); }

th_status get_layout(th_instance* instance, const th_kv_layout** out, th_error* err) {
  return sdk::guard(err, [&] { *out = &self(instance).layout(); });
}

th_status seq_reserve(th_instance* instance, uint64_t seq, uint32_t n_positions, uint32_t first_write,
                      th_error* err) {
  return sdk::guard(err, [&] { return self(instance).reserve(seq, n_positions, first_write); });
}

void seq_free(th_instance* instance, uint64_t seq) { self(instance).free_seq(seq); }

th_status seq_fork(th_instance* instance, uint64_t parent, uint64_t child, th_error* err) {
  return sdk::guard(err, [&] { return self(instance).fork(parent, child); });
}

th_status seq_blocks(th_instance* instance, uint64_t seq, const int32_t** blocks, uint32_t* n_blocks,
                     th_error* err) {
  return sdk::guard(err, [&] { return self(instance).blocks(seq, blocks, n_blocks); });
}

void stats(th_instance* instance, th_kv_stats* out) { self(instance).stats(out); }

th_status seq_truncate(th_instance* instance, uint64_t seq, uint32_t n_positions, th_error* err) {
  return sdk::guard(err, [&] { return self(instance).truncate(seq, n_positions); });
}

const th_kvcache_vtable kVtable = {
    sizeof(th_kvcache_vtable),
    sdk::create_instance<Paged>,
    sdk::destroy_instance<Paged>,
    check,
    get_layout,
    seq_reserve,
    seq_free,
    seq_fork,
    seq_blocks,
    stats,
    seq_truncate,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_KVCACHE,
    "kvcache.paged",              "1.0.0",              &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
