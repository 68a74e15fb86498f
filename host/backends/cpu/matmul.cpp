#include "backends/cpu/matmul.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "backends/backend.hpp"
#include "model/quant.hpp"
#include "base/compute_pool.hpp"
#include "backends/cpu/matmul_kernels.hpp"

namespace tokenhost {
namespace {

using namespace matmul_detail;

// Whether 512-bit registers are preferred: on AMD's cores (Zen 4 runs each 512-bit instruction as two
// 256-bit halves, Zen 5 at full width, both at full clock) they halve a kernel's instructions (the
// float tiles gained ~1.45x); the Intel Xeons with VNNI measured (Ice Lake) lower their clock on them.
bool prefer_512_bit() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

// The sets this CPU runs, preferred first.
std::vector<const KernelSet*> available_sets() {
  std::vector<const KernelSet*> sets;
  static const bool wide_first = prefer_512_bit();
  const std::array<const KernelSet*, 4> order = {wide_first ? avx512_set() : avx512vnni_set(),
                                                 wide_first ? avx512vnni_set() : avx512_set(), avx2_set(), portable_set()};
  for (const KernelSet* s : order)
    if (s != nullptr) sets.push_back(s);
  return sets;
}

std::string set_names() {
  std::string names;
  for (const KernelSet* s : available_sets()) names += (names.empty() ? "" : ", ") + std::string(s->name);
  return names;
}

const KernelSet* find_set(std::string_view name) {
  for (const KernelSet* s : available_sets())
    if (name == s->name) return s;
  return nullptr;
}

std::atomic<const KernelSet*>& current_set() {
  static std::atomic<const KernelSet*> set{[] {
    if (std::getenv("TOKENHOST_PORTABLE_KERNELS") != nullptr) return portable_set();
    const KernelSet* preferred = available_sets().front();
    if (const char* env = std::getenv("TOKENHOST_KERNELS")) {
      if (const KernelSet* s = find_set(env)) return s;
      spdlog::warn("TOKENHOST_KERNELS={}: no such kernel set on this CPU (it runs {}); using {}", env, set_names(),
                   preferred->name);
    }
    return preferred;
  }()};
  return set;
}

// Weight rows [o0, o1) as the kernels read them: row o0 + i starts i * row_bytes after data.
struct WeightBlock {
  const uint8_t* data;
  size_t row_bytes;
};

// One weight's share of a product: its out_rows outputs for activation rows [row0, row0 + n_rows) go
// to y ([n_rows][out_rows]); weight_block(o0, o1) gives a block of its rows (valid until the thread's
// next call). A plain product's segments take every row; a grouped product's, their group's.
template <class Block>
struct Segment {
  size_t out_rows;
  float* y;
  Block weight_block;
  size_t row0, n_rows;
};

// Products of 8 to this many x 4 activation rows take each tile of weight rows through all the groups
// of four before the next tile: the weights streamed from memory are used by every group while they
// are in L1, instead of by the first group (the others reading them again from L2). 8 rows of q8_0 at
// 2 threads, weights from memory: 768 columns 107 -> 145 GMAC/s, 2048 columns 122 -> 130; q4_0 -3%
// to +3%. Beyond 16 rows the activations no longer stay in L1.
constexpr size_t kTileMajorGroups = 4;

// The products y[r][o] = dot(weight row o, activation row r) of one or more weights with the same
// activation rows, through a type's kernels; rows_from(r) is the X of the activation rows from r on.
// The weights' output rows are numbered one after the other, and the pool's threads take contiguous
// ranges of them, each range in blocks of block_rows that stay in L2 while every activation row
// passes them four at a time: the weights are read from memory once per product, and the four rows'
// activations are reused from L1 across the block. Several weights in one call cost one start and
// one join of the pool instead of one each.
template <class X, class Rows, class Block>
void product(const TypeKernels<X>& k, const Segment<Block>* segments, size_t n_segments, Rows all_rows_from,
             size_t n, size_t block_rows) {
  const size_t tile_rows = k.tile != nullptr ? k.tile_rows : 1;
  block_rows = std::max(block_rows / tile_rows, size_t(1)) * tile_rows;
  // Rows [begin, end) of one segment.
  auto rows_of = [&](const Segment<Block>& seg, size_t begin, size_t end) {
    float out[4 * kMaxTileRows];
    float* y = seg.y;
    const size_t out_rows = seg.out_rows, n_rows = seg.n_rows;
    auto rows_from = [&](size_t r) { return all_rows_from(seg.row0 + r); };
    for (size_t o0 = begin; o0 < end; o0 += block_rows) {
      const size_t o1 = std::min(end, o0 + block_rows);
      const WeightBlock wb = seg.weight_block(o0, o1);
      // Up to kMaxAtOnce rows through one kernel where the set has it: the weights read once. More rows
      // pass the block in as few passes as that takes, of rows as even in number as they can be (9: 5
      // and 4, not 8 and 1): each pass reads the block from L2 once for all its rows, where groups of
      // four read it once per four. Balanced passes against groups of four and 2-row tiles, q8_0 / q4_0
      // from memory, 2048 columns, 2 threads (Zen 5, 2026-12-07, 5 alternating runs): 9 rows 1.09x /
      // 0.99x, 12 1.22x / 1.05x, 17 1.35x / 1.11x, 24 1.02x / 1.05x, 33 1.08x / 1.0x, 64 1.05x / 1.04x.
      if (k.at_once[std::min(n_rows, kMaxAtOnce)] != nullptr) {
        const size_t passes = (n_rows + kMaxAtOnce - 1) / kMaxAtOnce;
        for (size_t p = 0, r = 0; p < passes; ++p) {
          const size_t rows = n_rows / passes + (p < n_rows % passes ? 1 : 0);
          k.at_once[rows](wb.data, wb.row_bytes, o1 - o0, rows_from(r), n, y + r * out_rows + o0, out_rows);
          r += rows;
        }
        continue;
      }
      // Groups of four activation rows: each passes the whole block (its weights from L2 after the
      // first), or, for a few groups, each tile of weight rows passes every group while it is in L1.
      const size_t groups = n_rows / 4;
      auto tiles = [&](size_t o, size_t g_begin, size_t g_end) {
        const size_t width = o + tile_rows <= o1 ? tile_rows : 1;
        for (size_t g = g_begin; g < g_end; ++g) {
          (width == 1 ? k.four : k.tile)(wb.data + (o - o0) * wb.row_bytes, wb.row_bytes, rows_from(4 * g), n, out);
          for (size_t i = 0; i < width; ++i)
            for (size_t j = 0; j < 4; ++j) y[(4 * g + j) * out_rows + o + i] = out[i * 4 + j];
        }
        return width;
      };
      if (groups >= 2 && groups <= kTileMajorGroups) {
        for (size_t o = o0; o < o1;) o += tiles(o, 0, groups);
      } else {
        for (size_t g = 0; g < groups; ++g)
          for (size_t o = o0; o < o1;) o += tiles(o, g, g + 1);
      }
      // The 1-3 rows after the groups: together through `three` or `two` where the set has them.
      for (size_t r = 4 * groups; r < n_rows;) {
        const size_t left = n_rows - r;
        const auto [kernel, width] = left >= 3 && k.three   ? std::pair{k.three, size_t(3)}
                                     : left >= 2 && k.two ? std::pair{k.two, size_t(2)}
                                                          : std::pair{k.one, size_t(1)};
        const X x = rows_from(r);
        for (size_t o = o0; o < o1; ++o) {
          const uint8_t* wr = wb.data + (o - o0) * wb.row_bytes;
          if (width == 1) {  // decode: straight into y
            kernel(wr, wb.row_bytes, x, n, &y[r * out_rows + o]);
            continue;
          }
          kernel(wr, wb.row_bytes, x, n, out);
          for (size_t j = 0; j < width; ++j) y[(r + j) * out_rows + o] = out[j];
        }
        r += width;
      }
    }
  };
  size_t total = 0, work = 0;
  for (size_t i = 0; i < n_segments; ++i) total += segments[i].out_rows, work += segments[i].out_rows * segments[i].n_rows;
  auto body = [&](size_t begin, size_t end) {
    size_t first = 0;  // the segment's first row in the numbering of all
    for (size_t i = 0; i < n_segments && first < end; first += segments[i++].out_rows) {
      const size_t last = first + segments[i].out_rows;
      if (last > begin) rows_of(segments[i], std::max(begin, first) - first, std::min(end, last) - first);
    }
  };
  // Small products are not worth waking the pool: below 256K multiply-adds (a quarter of a megabyte
  // of q8_0 weights at one row; n counts blocks of 32 for the integer kernels, elements for the float
  // ones). A one-row product streams its weights from memory at what one thread reads (about half of
  // two), and the pool's threads, spinning between a step's products, start in a microsecond or two:
  // from 1M multiply-adds down to 256K, a decode of 110M Q8_0 (its 768 x 768 attention output then on
  // both cores) went 1.02-1.09x faster (6 alternations, 2 threads, Zen 5). Threads claim ranges of
  // weight rows (about four per thread, at most a block) as they go: one that the OS runs late takes
  // fewer.
  constexpr size_t kPoolMacs = 256 * 1024;
  const size_t macs_per_unit = std::is_same_v<X, QRows> ? kBlock : 1;
  ComputePool& pool = compute_pool();
  if (work * n * macs_per_unit < kPoolMacs || pool.threads() == 1) return body(0, total);
  const size_t grain = std::clamp(total / (4 * pool.threads()), tile_rows, block_rows) / tile_rows * tile_rows;
  pool.parallel_for(total, body, grain);
}

template <class X, class Rows, class Block>
void product(const TypeKernels<X>& k, size_t out_rows, Rows rows_from, size_t n_rows, size_t n,
             size_t block_rows, float* y, Block weight_block) {
  const Segment<Block> one{out_rows, y, weight_block, 0, n_rows};
  product(k, &one, 1, rows_from, n, block_rows);
}

// Weight rows per block: about kBlockBytes of them, a fifth of this Xeon's L2 (a quarter to half of
// L2 measured the same; less was slower).
constexpr size_t kBlockBytes = 256 * 1024;
size_t rows_per_block(size_t row_bytes) { return std::max<size_t>(1, kBlockBytes / std::max<size_t>(row_bytes, 1)); }

// The weight rows themselves.
auto weight_rows(const WeightView& w) {
  return [&w](size_t o0, size_t) { return WeightBlock{w.row(int64_t(o0)), w.row_bytes}; };
}

// One weight of a product and the activation rows it takes: every row of a plain product, its group's
// of a grouped one; y holds its outputs for those rows ([n_rows][w.rows]).
struct Part {
  const WeightView* w;
  float* y;
  size_t row0, n_rows;
};

std::vector<Part> parts_of(const MatmulOutput* outputs, size_t count, size_t n_rows) {
  std::vector<Part> parts;
  for (size_t i = 0; i < count; ++i) parts.push_back({&outputs[i].w, outputs[i].y, 0, n_rows});
  return parts;
}

// The segments of a product of several weights: each part's weight rows, destination and rows.
auto segments_of(const std::vector<Part>& parts) {
  std::vector<Segment<decltype(weight_rows(*parts[0].w))>> segments;
  segments.reserve(parts.size());
  for (const Part& p : parts) segments.push_back({size_t(p.w->rows), p.y, weight_rows(*p.w), p.row0, p.n_rows});
  return segments;
}

// Integer kernels: activations quantized once per product (in parallel for large batches), for every
// part's weight (all of one type and width). rows_per_weight (the rows each weight takes, on average)
// picks the packed kernels or the direct ones.
void quantized_product(const std::vector<Part>& parts, const KernelSet& set, const TypeKernels<QRows>& k,
                       const float* x, size_t n_rows, size_t rows_per_weight) {
  const WeightView& w = *parts[0].w;
  const size_t cols = size_t(w.cols), nb = cols / kBlock;
  // The calling thread's buffers; the pool's threads reach them through these pointers. The 512-bit
  // layouts pad each row to whole groups and keep its scales row-major (see QBlock). Weights packed at
  // load take the packed kernels at every row count, decode included; weights as they are take them
  // from packed->min_rows rows on (on blocks of rows packed here, which fewer rows do not pay back)
  // and the direct kernels below that.
  const bool prepacked = k.packed != nullptr && std::all_of(parts.begin(), parts.end(), [&](const Part& p) {
                           return p.w->packed != nullptr && p.w->packed_for == &set;
                         });
  const PackedKernels* packed =
      k.packed != nullptr && (prepacked || rows_per_weight >= k.packed->min_rows) ? k.packed : nullptr;
  const QLayout layout = packed != nullptr ? QLayout::groups : k.layout;
  const bool wide = layout == QLayout::quads || layout == QLayout::groups;
  const size_t row_blocks = wide ? group_blocks(nb) : nb;
  thread_local std::vector<QBlock> block_buffer;
  thread_local std::vector<float> scale_buffer;
  block_buffer.resize(n_rows * row_blocks);
  scale_buffer.resize(2 * row_blocks * n_rows);
  QBlock* blocks = block_buffer.data();
  float* scales = scale_buffer.data();
  float* sums = k.wants_sums ? scales + row_blocks * n_rows : nullptr;
  auto quantize = [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      QBlock* row = blocks + r * row_blocks;
      if (wide) {
        float* d = scales + r * row_blocks;
        set.quantize(x + r * cols, nb, k.bias_k, row, d, nullptr, 1);
        if (layout == QLayout::quads) to_quad_layout(row, d, nb);
        else to_group_layout(row, d, nb);
        continue;
      }
      set.quantize(x + r * cols, nb, k.bias_k, row, scales + r, sums ? sums + r : nullptr, n_rows);
      if (layout == QLayout::pairs) pair_blocks(row, nb);
    }
  };
  if (n_rows >= 4 && n_rows * cols >= 32768) compute_pool().parallel_for(n_rows, quantize);
  else quantize(0, n_rows);
  auto rows_from = [&](size_t r) {
    if (wide) return QRows{blocks + r * row_blocks, scales + r * row_blocks, nullptr, 1};
    return QRows{blocks + r * nb, scales + r, sums ? sums + r : nullptr, n_rows};
  };
  if (packed != nullptr) {
    const size_t packed_bytes = packed->row_bytes(nb);
    TypeKernels<QRows> pk;  // at_once for every row count (PackedKernels)
    std::copy(std::begin(packed->at_once), std::end(packed->at_once), std::begin(pk.at_once));
    std::vector<Segment<std::function<WeightBlock(size_t, size_t)>>> segments;
    for (const Part& p : parts) {
      const WeightView& wi = *p.w;
      segments.push_back({size_t(wi.rows), p.y, [&wi, packed, packed_bytes, nb, prepacked](size_t o0, size_t o1) {
                            if (prepacked)
                              return WeightBlock{static_cast<const uint8_t*>(wi.packed) + o0 * packed_bytes, packed_bytes};
                            thread_local std::vector<QBlock> buffer;  // 64-byte aligned
                            buffer.resize(((o1 - o0) * packed_bytes + sizeof(QBlock) - 1) / sizeof(QBlock));
                            uint8_t* dst = reinterpret_cast<uint8_t*>(buffer.data());
                            packed->repack(wi.row(int64_t(o0)), wi.row_bytes, o1 - o0, nb, dst);
                            return WeightBlock{dst, packed_bytes};
                          }, p.row0, p.n_rows});
    }
    return product(pk, segments.data(), segments.size(), rows_from, nb, rows_per_block(packed_bytes));
  }
  const auto segments = segments_of(parts);
  product(k, segments.data(), segments.size(), rows_from, nb, rows_per_block(w.row_bytes));
}

// f32 activations, each row starting on a cache line: a 32-byte load that straddles two lines costs
// two, and the float kernels load an activation vector per multiply-add. Rows that are not aligned
// (a std::vector's data is 16-byte aligned) are copied, once per product, into the calling thread's
// buffer (the pool's threads reach it through the pointer).
struct alignas(64) FloatLine {
  float v[16];
};
constexpr size_t kLine = 16;
size_t padded(size_t cols) { return (cols + kLine - 1) / kLine * kLine; }

FRows aligned_rows(const float* x, size_t n_rows, size_t cols) {
  if (reinterpret_cast<uintptr_t>(x) % 64 == 0 && cols % kLine == 0) return FRows{x, cols};
  thread_local std::vector<FloatLine> buffer;
  const size_t stride = padded(cols);
  buffer.resize(n_rows * stride / kLine);
  float* copy = buffer.data()->v;
  for (size_t r = 0; r < n_rows; ++r) std::memcpy(copy + r * stride, x + r * cols, cols * sizeof(float));
  return FRows{copy, stride};
}

auto float_rows(const FRows& x) {
  return [x](size_t r) { return FRows{x.x + r * x.stride, x.stride}; };
}

// Other types: each block of weight rows dequantized to f32 (aligned rows) once per product, then
// the f32 kernels.
void dequantized_product(const WeightView& w, const KernelSet& set, const FRows& x, size_t n_rows, float* y) {
  const size_t cols = size_t(w.cols), stride = padded(cols);
  product(set.f32, size_t(w.rows), float_rows(x), n_rows, cols, rows_per_block(stride * sizeof(float)), y,
          [&](size_t o0, size_t o1) {
            thread_local std::vector<FloatLine> buffer;
            buffer.resize((o1 - o0) * stride / kLine);
            float* rows = buffer.data()->v;
            for (size_t o = o0; o < o1; ++o)
              quant::dequantize_row(w.type, w.row(int64_t(o)), rows + (o - o0) * stride, int64_t(cols));
            return WeightBlock{reinterpret_cast<const uint8_t*>(rows), stride * sizeof(float)};
          });
}

}  // namespace

std::vector<std::string> matmul_kernel_sets() {
  std::vector<std::string> names;
  for (const KernelSet* s : available_sets()) names.emplace_back(s->name);
  return names;
}

const char* matmul_kernels() { return current_set().load()->name; }

void use_matmul_kernels(std::string_view name) {
  const KernelSet* s = find_set(name);
  if (s == nullptr)
    throw std::invalid_argument("matmul kernel set '" + std::string(name) +
                                "' is unknown or needs what this CPU lacks (it runs " + set_names() + ")");
  current_set().store(s);
}

namespace {
const TypeKernels<QRows>* integer_kernels(const KernelSet& set, th_dtype type) {
  switch (type) {
    case TH_DTYPE_Q8_0:
      return &set.q8_0;
    case TH_DTYPE_Q4_0:
      return &set.q4_0;
    case TH_DTYPE_Q4_K:
      return &set.q4_K;
    case TH_DTYPE_Q6_K:
      return &set.q6_K;
    default:
      return nullptr;
  }
}

// The packed kernels of the set in use for w's type, or null.
const PackedKernels* packed_kernels(const KernelSet& set, const WeightView& w) {
  const TypeKernels<QRows>* k = integer_kernels(set, w.type);
  if (k == nullptr || k->packed == nullptr || w.rows <= 0 || w.empty()) return nullptr;
  return k->packed;
}
}  // namespace

size_t packed_size(const WeightView& w) {
  const PackedKernels* packed = packed_kernels(*current_set().load(), w);
  return packed != nullptr ? packed->row_bytes(size_t(w.cols) / kBlock) * size_t(w.rows) : 0;
}

void pack_weight_into(WeightView& w, void* memory, size_t bytes) {
  const KernelSet& set = *current_set().load();
  const PackedKernels* packed = packed_kernels(set, w);
  const size_t nb = size_t(w.cols) / kBlock, row_bytes = packed != nullptr ? packed->row_bytes(nb) : 0;
  if (packed == nullptr || bytes != row_bytes * size_t(w.rows))  // the kernel set changed since packed_size
    throw std::logic_error("pack_weight_into: " + std::to_string(bytes) + " bytes given, the packed copy takes " +
                           std::to_string(row_bytes * size_t(w.rows)));
  uint8_t* dst = static_cast<uint8_t*>(memory);
  compute_pool().parallel_for(
      size_t(w.rows),
      [&](size_t begin, size_t end) {
        packed->repack(w.row(int64_t(begin)), w.row_bytes, end - begin, nb, dst + begin * row_bytes);
      },
      64);
  w.packed = dst;
  w.packed_for = &set;
  w.packed_row_bytes = row_bytes;
}

std::shared_ptr<void> pack_weight(WeightView& w) {
  const size_t bytes = packed_size(w);
  if (bytes == 0) return nullptr;
  std::string why;
  void* dst = device_alloc(TH_DEVICE_CPU, 0, bytes, 64, why);
  if (dst == nullptr) throw std::bad_alloc();
  std::shared_ptr<void> owner(dst, [](void* p) { device_free(TH_DEVICE_CPU, p); });
  pack_weight_into(w, dst, bytes);
  return owner;
}

void matmul(const WeightView& w, const float* x, size_t n_rows, float* y) {
  if (n_rows == 0) return;
  const KernelSet& set = *current_set().load();
  const size_t cols = size_t(w.cols);
  if (const TypeKernels<QRows>* k = integer_kernels(set, w.type)) {
    const MatmulOutput one{w, y};
    return quantized_product(parts_of(&one, 1, n_rows), set, *k, x, n_rows, n_rows);
  }
  const FRows rows = aligned_rows(x, n_rows, cols);
  const size_t block = rows_per_block(w.row_bytes);
  switch (w.type) {
    case TH_DTYPE_F32:
      return product(set.f32, size_t(w.rows), float_rows(rows), n_rows, cols, block, y, weight_rows(w));
    case TH_DTYPE_F16:
      return product(set.f16, size_t(w.rows), float_rows(rows), n_rows, cols, block, y, weight_rows(w));
    default:
      return dequantized_product(w, set, rows, n_rows, y);
  }
}

void matmul(std::initializer_list<MatmulOutput> outputs, const float* x, size_t n_rows) {
  if (n_rows == 0 || outputs.size() == 0) return;
  const KernelSet& set = *current_set().load();
  const WeightView& first = outputs.begin()->w;
  const TypeKernels<QRows>* k = integer_kernels(set, first.type);
  const TypeKernels<FRows>* f = first.type == TH_DTYPE_F32 ? &set.f32 : first.type == TH_DTYPE_F16 ? &set.f16 : nullptr;
  const bool shared = (k != nullptr || f != nullptr) &&
                      std::all_of(outputs.begin(), outputs.end(), [&](const MatmulOutput& o) {
                        return o.w.type == first.type && o.w.cols == first.cols;
                      });
  if (!shared) {
    for (const MatmulOutput& o : outputs) matmul(o.w, x, n_rows, o.y);
    return;
  }
  const std::vector<Part> parts = parts_of(outputs.begin(), outputs.size(), n_rows);
  if (k != nullptr) return quantized_product(parts, set, *k, x, n_rows, n_rows);
  const size_t cols = size_t(first.cols);
  const auto segments = segments_of(parts);
  product(*f, segments.data(), segments.size(), float_rows(aligned_rows(x, n_rows, cols)), cols,
          rows_per_block(first.row_bytes));
}

void grouped_matmul(const MatmulGroup* groups, size_t n_groups, size_t n_products, const float* x, float* const* y) {
  if (n_groups == 0 || n_products == 0) return;
  const KernelSet& set = *current_set().load();
  const WeightView& first = groups[0].weights[0];
  const size_t cols = size_t(first.cols);
  std::vector<Part> parts;
  size_t n_rows = 0, busy = 0;
  bool uniform = true;
  for (size_t g = 0; g < n_groups; ++g) {
    const MatmulGroup& group = groups[g];
    n_rows = std::max(n_rows, group.row0 + group.n_rows);
    if (group.n_rows == 0) continue;  // its weights are not read
    ++busy;
    for (size_t j = 0; j < n_products; ++j) {
      const WeightView& w = group.weights[j];
      uniform = uniform && w.type == first.type && w.cols == first.cols;
      parts.push_back({&w, y[j] + group.row0 * size_t(w.rows), group.row0, group.n_rows});
    }
  }
  if (parts.empty()) return;
  const TypeKernels<QRows>* k = integer_kernels(set, first.type);
  const TypeKernels<FRows>* f = first.type == TH_DTYPE_F32 ? &set.f32 : first.type == TH_DTYPE_F16 ? &set.f16 : nullptr;
  if (!uniform || (k == nullptr && f == nullptr)) {  // bf16, or mixed: part by part
    for (const Part& p : parts) matmul(*p.w, x + p.row0 * size_t(p.w->cols), p.n_rows, p.y);
    return;
  }
  // x is quantized (or aligned) once for every group; the pool starts once for all of them.
  if (k != nullptr) return quantized_product(parts, set, *k, x, n_rows, (n_rows + busy - 1) / busy);
  const auto segments = segments_of(parts);
  product(*f, segments.data(), segments.size(), float_rows(aligned_rows(x, n_rows, cols)), cols,
          rows_per_block(first.row_bytes));
}

}  // namespace tokenhost
