// kvcache.paged: a paged KV block manager (vLLM style) in host memory.
//
// One K pool and one V pool laid out [layer][block][kv_head][token][head_dim] in the model's kv dtype
// (th_model_info.kv_dtype: f32 or f16, which the engine chooses), a free list,
// a reference count per block, and a block table per sequence. Forked sequences share blocks; a
// shared block is copied the first time a sequence reserves a write into it (copy-on-write).
// Truncation (speculative decoding's rollback) gives back the blocks past the kept positions. The
// block rules are the SDK's (plugin_kv_pool.hpp), shared with kvcache.prefix; this plugin adds the
// kv_blocks_used gauge.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv_pool.hpp>

namespace {

namespace sdk = tokenhost::sdk;

constexpr const char* kId = TH_PLUGIN_ID;  // plugin.toml's id (tokenhost_add_plugin)

th_status check(const th_check_query* query, th_error* err) { return sdk::kv_pool_check(kId, query, err); }

class Paged : public sdk::KvBlockPool {
 public:
  explicit Paged(const th_create_args& args) : KvBlockPool(args, kId) {
    th_metric_desc desc{};
    desc.struct_size = sizeof(th_metric_desc);
    desc.type = TH_METRIC_GAUGE;
    desc.name = "kv_blocks_used";
    desc.help = "KV cache blocks referenced by at least one sequence";
    if (sdk::host().metric_create(args.host_ctx, &desc, &used_metric_, nullptr) != TH_OK) {
      used_metric_ = nullptr;
      sdk::log(args.host_ctx, TH_LOG_DEBUG, "kvcache.paged: cannot create the kv_blocks_used metric");
    }
    changed();
  }

 private:
  void changed() override {
    if (used_metric_ == nullptr) return;
    th_kv_stats s{};
    s.struct_size = sizeof s;
    stats(&s);
    sdk::host().metric_set(used_metric_, nullptr, double(s.used_blocks));
  }

  th_metric* used_metric_ = nullptr;
};

// No prefix caching: seq_lookup, seq_publish and cache_flush stay NULL (th_kvcache.h: all three or none).
const th_kvcache_vtable kVtable = sdk::kv_pool_vtable<Paged>(check);

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_KVCACHE, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
