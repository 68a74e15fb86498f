// attention.cpu_flash: fast causal paged attention on the CPU.
//
// The contract of attention.reference (same batch validation, same check() refusals: both come from
// tokenhost/plugin_kv.hpp), over an f32, f16 or q8_0 KV cache, computed flash-attention style in f32
// (f16 keys and values become floats as the kernels load them; a q8_0 block's keys and values are
// dequantized into a tile of floats first, then read as an f32 block): one work item is (sequence, kv
// heads, chunk of query rows): one kv head and a chunk of a prefill's rows, or the few rows of a decode or
// a verification and all the sequence's kv heads (or a share of them, to keep every thread busy). It
// walks the sequence's KV blocks in order and, for each of its kv heads, every query head of that head's
// group and every row of the chunk that reaches the block, scores the block's keys, updates a running
// max and sum (rescaling the accumulator when the max grows) and adds p * v. Each KV block is read once
// per item while it is hot in cache, and no score row longer than one block exists. Items run on the
// host's compute threads (th_host_api.parallel_for), the calling thread taking part.
//
// Under tree attention (row_parent, ABI 1.4) a row walks the blocks through the end of the run of its
// sequence's first rows that are its ancestors (sdk::tree_visible), then takes its other ancestors and
// itself one position at a time, in the same running state.
//
// Every (row, head) output is computed by one thread with the same operations whatever the chunking
// and the thread count, so results do not depend on `threads`.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv.hpp>

#include "kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using cpu_flash::Kernels;
using sdk::Error;

constexpr const char* kId = TH_PLUGIN_ID;  // plugin.toml's id (tokenhost_add_plugin)

// The KV caches it reads (kernels.hpp has a pair of cache kernels for f32 and f16; q8_0 blocks are
// dequantized into f32 tiles).
constexpr std::initializer_list<th_dtype> kKvDtypes = {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0};

// ---- the instance -------------------------------------------------------------------------------

// Rows [r0, r1) of sequence seq against kv heads [h0, h1), for every query head of their groups.
struct Item {
  uint32_t seq, h0, h1, r0, r1;
  uint64_t cost;  // multiply-adds of q . k, for ordering
};

// One participant's running state: per (row, head of the group) max m, sum l, accumulator acc[d].
struct Scratch {
  std::vector<float> acc, m, l, s;
  std::vector<float> k_tile, v_tile;  // q8_0: one block's keys and values of one kv head, dequantized
};

// The host's compute threads this instance uses at most: the configured count, or all of them.
unsigned thread_count(th_host_ctx* ctx, int64_t configured) {
  const unsigned available = std::max(1u, sdk::host().compute_threads(ctx));
  return configured > 0 ? std::min(unsigned(configured), available) : available;
}

// The `kernels` setting: a level this CPU runs, or "auto". Throws TH_ERR_INVALID_ARGUMENT naming it.
const Kernels& configured_kernels(const th_config* config) {
  const std::string name = sdk::Config(config).require_string("kernels");
  if (const Kernels* k = cpu_flash::find_kernels(name)) return *k;
  throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": config 'kernels' = '" + name +
                                           "' is not one of auto, avx2, portable that this CPU runs");
}

struct CpuFlash {
  explicit CpuFlash(const th_create_args& args)
      : host_ctx(args.host_ctx),
        kernels(configured_kernels(args.config)),
        threads(thread_count(args.host_ctx, sdk::Config(args.config).require_int("threads"))) {
    scratch.resize(threads);
    sdk::log(args.host_ctx, TH_LOG_DEBUG,
             std::string(kernels.name) + " kernels, " + std::to_string(threads) + " of the host's compute threads");
  }
  th_host_ctx* host_ctx;
  const Kernels& kernels;
  unsigned threads;
  std::vector<Scratch> scratch;  // one per participant
  std::vector<Item> items;
  // Tree attention, per row of the batch: the last position of its contiguous view, and its other
  // visible positions at extra[extra_start[i] .. extra_start[i + 1]). Empty without row_parent.
  std::vector<int64_t> through;
  std::vector<uint32_t> extra_start, extra;
};

// What row i sees: every position through the returned one (-1: none), and *n_extra single positions at
// *extra after it (tree attention only).
struct RowView {
  int64_t through;
  const uint32_t* extra;
  uint32_t n_extra;
};

// x = f * y (x may be y).
void scale_into(float* x, const float* y, float f, uint32_t d) {
  size_t e = 0;
  for (; e + 8 <= d; e += 8) {
    float z[8];
    for (size_t j = 0; j < 8; ++j) z[j] = f * y[e + j];
    for (size_t j = 0; j < 8; ++j) x[e + j] = z[j];
  }
  for (; e < d; ++e) x[e] = f * y[e];
}

constexpr float kLazyMax = 8.0f;

// How far past a head's keys and values an item asks for the next bytes (see run_item): 3 KiB, as the
// host's products (kPrefetchAhead in the CPU backend); measured on 110M Q8_0 at 1000 positions, it took
// attention's share of a decode from 32-35% to 24-25%.
constexpr int64_t kStreamAhead = 3072;

// Asks for the keys and values of kv heads [h0, h1) in block `block` while the current block is
// computed: a block that does not follow the current one in the pool is where the hardware
// prefetchers, which follow runs of memory, do not look, and a decode row would wait on memory there.
void prefetch_block(const th_kv_layout& kv, uint32_t layer, int32_t block, uint32_t h0, uint32_t h1) {
  const int64_t bytes = int64_t(kv.block_size) * kv.token_stride;
  for (uint32_t h = h0; h < h1; ++h)
    for (const void* base : {kv.k_base, kv.v_base}) {
      const char* p = sdk::kv_head_bytes(kv, base, layer, block, 0, h);
      for (int64_t at = 0; at < bytes; at += 64) __builtin_prefetch(p + at);
    }
}

void run_item(const th_attention_batch& b, const Kernels& kernels, const Item& it, Scratch& sc, const CpuFlash& self) {
  const bool tree = !self.through.empty();
  auto view = [&](uint32_t i) {
    if (!tree) return RowView{b.positions[i], nullptr, 0};
    return RowView{self.through[i], self.extra.data() + self.extra_start[i], self.extra_start[i + 1] - self.extra_start[i]};
  };
  const th_kv_layout& kv = *b.kv;
  const bool q8 = kv.dtype == TH_DTYPE_Q8_0;
  const cpu_flash::CacheKernels& kn = kv.dtype == TH_DTYPE_F16 ? kernels.f16 : kernels.f32;  // q8_0: f32 tiles
  const int64_t stride = q8 ? int64_t(b.head_dim) * int64_t(sizeof(float)) : kv.token_stride;
  const uint32_t group = b.n_heads / b.n_kv_heads, d = b.head_dim, bs = kv.block_size;
  const uint32_t n_rows = it.r1 - it.r0, n_item_heads = it.h1 - it.h0, n_state = n_rows * n_item_heads * group;
  // The running state of row r, query head j of kv head h's group.
  auto state = [&](uint32_t r, uint32_t h, uint32_t j) { return (r * n_item_heads + (h - it.h0)) * group + j; };
  float *acc = sc.acc.data(), *m = sc.m.data(), *l = sc.l.data(), *s = sc.s.data();
  std::fill_n(acc, size_t(n_state) * d, 0.0f);
  std::fill_n(m, n_state, -INFINITY);
  std::fill_n(l, n_state, 0.0f);
  // Row r's keys kb and values vb of kv head h at nt positions, for every head of h's group, into its
  // running state.
  auto take = [&](uint32_t r, uint32_t h, const char* kb, const char* vb, uint32_t nt) {
    const float* q = b.q + int64_t(it.r0 + r) * b.q_row_stride + int64_t(h) * group * d;
    for (uint32_t j = 0; j < group; ++j) {
      const uint32_t st = state(r, h, j);
      float* a = acc + size_t(st) * d;
      const float block_max = kn.scores(q + size_t(j) * d, kb, stride, nt, d, b.scale, s);
      // The reference max m moves (rescaling what was summed under it; 0 at the first block) only
      // when a block's max exceeds it by more than kLazyMax: weights stay <= e^kLazyMax, far from
      // overflow, and almost every rescale is skipped. The softmax does not depend on m.
      if (block_max > m[st] + kLazyMax) {
        const float f = std::exp(m[st] - block_max);
        l[st] *= f;
        scale_into(a, a, f, d);
        m[st] = block_max;
      }
      l[st] += kernels.exp_sum(s, nt, m[st]);
      kn.accum(a, s, vb, stride, nt, d);
    }
  };
  int64_t max_pos = -1;
  for (uint32_t i = it.r0; i < it.r1; ++i) max_pos = std::max(max_pos, view(i).through);
  const int32_t* table = b.block_tables[it.seq];
  // q8_0: positions [t0, t0 + n) of kv head h in pool block `block` into the tiles, as floats; returns
  // the tiles.
  auto dequantize = [&](int32_t block, uint32_t t0, uint32_t n, uint32_t h) {
    for (uint32_t t = 0; t < n; ++t) {
      for (const bool values : {false, true}) {
        const auto* q = reinterpret_cast<const int8_t*>(sdk::kv_head_bytes(kv, values ? kv.v_base : kv.k_base, b.layer, block, t0 + t, h));
        const float* scales = sdk::kv_head_scales(kv, values ? kv.v_scale_base : kv.k_scale_base, b.layer, block, t0 + t, h);
        kernels.dequant_q8(q, scales, d, kv.quant_group, (values ? sc.v_tile : sc.k_tile).data() + size_t(t) * d);
      }
    }
    return std::pair{reinterpret_cast<const char*>(sc.k_tile.data()), reinterpret_cast<const char*>(sc.v_tile.data())};
  };
  const int64_t head_bytes = int64_t(bs) * kv.token_stride;
  for (int64_t blk = 0; max_pos >= 0 && blk <= max_pos / bs; ++blk) {
    const int64_t p0 = blk * bs;
    // The next block where it does not follow this one in the pool (the hardware prefetchers, which
    // follow runs of memory, bring a block that does: asking for it too was no faster).
    if (blk < max_pos / bs && table[blk + 1] != table[blk] + 1) prefetch_block(kv, b.layer, table[blk + 1], it.h0, it.h1);
    for (uint32_t h = it.h0; h < it.h1; ++h) {
      const char* kb = sdk::kv_head_bytes(kv, kv.k_base, b.layer, table[blk], 0, h);
      const char* vb = sdk::kv_head_bytes(kv, kv.v_base, b.layer, table[blk], 0, h);
      if (q8) {
        std::tie(kb, vb) = dequantize(table[blk], 0, uint32_t(std::min<int64_t>(bs, max_pos - p0 + 1)), h);
      } else {
        // The heads' keys and values are runs of memory across 4 KiB pages, where the hardware
        // prefetchers stop: ask for the bytes kStreamAhead past this head's, as the products do.
        for (int64_t at = 0; at < head_bytes; at += 64) {
          __builtin_prefetch(kb + kStreamAhead + at);
          __builtin_prefetch(vb + kStreamAhead + at);
        }
      }
      for (uint32_t r = 0; r < n_rows; ++r) {
        const int64_t pos = view(it.r0 + r).through;
        if (pos < p0) continue;  // causal: this row ends before the block
        take(r, h, kb, vb, uint32_t(std::min<int64_t>(bs, pos - p0 + 1)));
      }
    }
  }
  for (uint32_t r = 0; tree && r < n_rows; ++r) {  // tree attention: the row's other ancestors and itself
    const RowView v = view(it.r0 + r);
    for (uint32_t e = 0; e < v.n_extra; ++e) {
      const uint32_t p = v.extra[e];
      for (uint32_t h = it.h0; h < it.h1; ++h) {
        if (q8) {
          const auto [kt, vt] = dequantize(table[p / bs], p % bs, 1, h);
          take(r, h, kt, vt, 1);
          continue;
        }
        take(r, h, sdk::kv_head_bytes(kv, kv.k_base, b.layer, table[p / bs], p % bs, h),
             sdk::kv_head_bytes(kv, kv.v_base, b.layer, table[p / bs], p % bs, h), 1);
      }
    }
  }
  for (uint32_t r = 0; r < n_rows; ++r)
    for (uint32_t h = it.h0; h < it.h1; ++h) {
      float* out = b.out + int64_t(it.r0 + r) * b.out_row_stride + int64_t(h) * group * d;
      for (uint32_t j = 0; j < group; ++j) {
        const uint32_t st = state(r, h, j);
        scale_into(out + size_t(j) * d, acc + size_t(st) * d, 1.0f / l[st], d);
      }
    }
}

// Below this many multiply-adds (q . k and p * v together) a batch runs on the calling thread alone.
constexpr uint64_t kParallelWork = 64 * 1024;

// Sequences of at most this many rows in a batch take their kv heads together (see forward()).
constexpr uint32_t kFewRows = 8;

th_status forward(th_instance* instance, const th_attention_batch* batch, th_error* err) {
  return sdk::guard(err, [&] {
    if (const std::string why = sdk::validate_attention_batch(batch, kKvDtypes); !why.empty()) {
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": " + why);
    }
    CpuFlash& self = sdk::self<CpuFlash>(instance);
    const th_attention_batch& b = *batch;
    const uint32_t group = b.n_heads / b.n_kv_heads, d = b.head_dim;
    const unsigned n_threads = self.threads;

    // Rows per item: the running state of one item (rows x group x d floats) stays within ~64 KiB,
    // and there are a few items per thread when the batch allows it.
    uint32_t chunk = std::clamp<uint32_t>(16384 / (group * d), 1, 64);
    const uint64_t want_items = uint64_t(4) * n_threads;
    const uint64_t per_head_items = (want_items + b.n_kv_heads - 1) / b.n_kv_heads;
    if (n_threads > 1 && b.n_tokens > 0 && uint64_t(b.n_tokens) / chunk < per_head_items) {
      chunk = uint32_t(std::max<uint64_t>(1, b.n_tokens / per_head_items));
    }

    self.through.clear();
    self.extra_start.clear();
    self.extra.clear();
    if (sdk::row_parent(b) != nullptr) {
      std::vector<uint32_t> extra;
      self.extra_start.push_back(0);
      for (uint32_t s = 0; s < b.n_seqs; ++s)
        for (uint32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
          self.through.push_back(sdk::tree_visible(b, s, i, extra));
          self.extra.insert(self.extra.end(), extra.begin(), extra.end());
          self.extra_start.push_back(uint32_t(self.extra.size()));
        }
    }

    // A sequence of few rows (a decode, a verification's drafts) is one item for all its kv heads, or
    // for as many of them as keep every thread busy when such sequences are few: the item walks the
    // blocks once and reads each block's keys, then values, of its heads, which lie together in the
    // pool (one run of memory the hardware prefetchers follow), where an item per head read a few KiB
    // here and there. Longer sequences (prefill chunks) take an item per (kv head, chunk of rows), each
    // block read once for the chunk's rows.
    auto rows_of = [&](uint32_t s) { return b.seq_start[s + 1] - b.seq_start[s]; };
    uint32_t few = 0;
    for (uint32_t s = 0; s < b.n_seqs; ++s) few += rows_of(s) > 0 && rows_of(s) <= kFewRows;
    const uint32_t splits = few == 0 || few >= n_threads ? 1 : std::min(b.n_kv_heads, (n_threads + few - 1) / few);
    const uint32_t heads_per_item = (b.n_kv_heads + splits - 1) / splits;
    std::vector<Item>& items = self.items;
    items.clear();
    uint64_t work = 0;
    size_t state = 0;  // the largest item's running states: (row, head) pairs
    for (uint32_t s = 0; s < b.n_seqs; ++s) {
      const bool together = rows_of(s) <= kFewRows;
      const uint32_t rows = together ? std::max(rows_of(s), 1u) : chunk, heads = together ? heads_per_item : 1;
      for (uint32_t r0 = b.seq_start[s]; r0 < b.seq_start[s + 1]; r0 += rows) {
        const uint32_t r1 = std::min(b.seq_start[s + 1], r0 + rows);
        uint64_t cost = 0;
        for (uint32_t i = r0; i < r1; ++i) cost += (uint64_t(b.positions[i]) + 1) * group * d;
        for (uint32_t h = 0; h < b.n_kv_heads; h += heads) {
          const uint32_t h1 = std::min(b.n_kv_heads, h + heads);
          items.push_back({s, h, h1, r0, r1, cost * (h1 - h)});
          state = std::max<size_t>(state, size_t(r1 - r0) * (h1 - h));
        }
        work += 2 * cost * b.n_kv_heads;
      }
    }
    if (items.empty()) return;
    const bool parallel = n_threads > 1 && items.size() >= 2 && work >= kParallelWork;
    if (parallel) {  // longest first, so that the last items to start are short
      std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) { return x.cost > y.cost; });
    }
    for (unsigned p = 0; p < (parallel ? n_threads : 1u); ++p) {
      Scratch& sc = self.scratch[p];
      sc.acc.resize(state * group * d);
      sc.m.resize(state * group);
      sc.l.resize(state * group);
      sc.s.resize(b.kv->block_size);
      if (b.kv->dtype == TH_DTYPE_Q8_0) {
        sc.k_tile.resize(size_t(b.kv->block_size) * d);
        sc.v_tile.resize(size_t(b.kv->block_size) * d);
      }
    }

    // Participant p (one index of the host's parallel_for each) claims items through the counter.
    std::atomic<size_t> next{0};
    auto participants = [&](size_t first, size_t last) {
      for (size_t p = first; p < last; ++p)
        for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < items.size();
             i = next.fetch_add(1, std::memory_order_relaxed)) {
          run_item(b, self.kernels, items[i], self.scratch[p], self);
        }
    };
    if (parallel) {
      sdk::parallel_for(self.host_ctx, n_threads, 0, n_threads, participants);
    } else {
      participants(0, 1);
    }
  });
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr || query->model == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": check() needs a model");
    }
    sdk::Config(query->config).require_int("threads");  // TH_ERR_INVALID_ARGUMENT when absent or mistyped
    configured_kernels(query->config);
    th_status status = TH_OK;
    for (const std::string& why : sdk::attention_cpu_refusals(*query->model, query->device, kKvDtypes)) {
      sdk::set_error(err, std::string(kId) + ": " + why);
      status = TH_ERR_UNSUPPORTED;
    }
    return status;
  });
}

const th_attention_vtable kVtable = {sizeof(th_attention_vtable), sdk::create_instance<CpuFlash>,
                                     sdk::destroy_instance<CpuFlash>, check, forward};
const th_plugin_descriptor kDescriptor = {sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR,
                                          TH_KIND_ATTENTION, kId, TH_PLUGIN_VERSION, &kVtable};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
