#include "runtime/matmul.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "model/quant.hpp"
#include "runtime/compute_pool.hpp"
#include "runtime/matmul_kernels.hpp"

namespace tokenhost {
namespace {

using namespace matmul_detail;

// The sets this CPU runs, preferred first.
std::vector<const KernelSet*> available_sets() {
  std::vector<const KernelSet*> sets;
  for (const KernelSet* s : {avx512vnni_set(), avx2_set(), portable_set()})
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

constexpr size_t kMaxTileRows = 8;

// The product y[r][o] = dot(weight row o, activation row r) through a type's kernels; rows(r) is the
// X of the activation rows from r on. Output rows are split across the pool in contiguous ranges.
// Within a range, activation rows go in groups small enough to stay in L2 while the range's weight
// rows stream past them (each weight row is read from memory once per group), in multiples of four
// for the four-row kernels. weight_row(o) is row o as the kernels read it; when rows_contiguous, row
// o + i lies i * w.row_bytes after it and the wider tiles are used.
template <class X, class Rows, class WeightRow>
void product(const WeightView& w, const TypeKernels<X>& k, Rows rows_from, size_t n_rows, size_t n,
             size_t act_row_bytes, float* y, WeightRow weight_row, bool rows_contiguous) {
  const size_t rows = size_t(w.rows);
  const size_t group = std::max<size_t>(4, ((64 * 1024) / std::max<size_t>(act_row_bytes, 1)) & ~size_t(3));
  const size_t tile_rows = rows_contiguous && k.tile != nullptr ? k.tile_rows : 1;
  auto body = [&](size_t begin, size_t end) {
    float out[4 * kMaxTileRows];
    for (size_t r0 = 0; r0 < n_rows; r0 += group) {
      const size_t r1 = std::min(n_rows, r0 + group);
      for (size_t o = begin; o < end;) {
        const size_t width = o + tile_rows <= end ? tile_rows : 1;
        const uint8_t* row = weight_row(o);
        size_t r = r0;
        for (; r + 4 <= r1; r += 4) {
          (width == 1 ? k.four : k.tile)(row, w.row_bytes, rows_from(r), n, out);
          for (size_t i = 0; i < width; ++i)
            for (size_t j = 0; j < 4; ++j) y[(r + j) * rows + o + i] = out[i * 4 + j];
        }
        for (; r < r1; ++r)
          for (size_t i = 0; i < width; ++i)
            k.one(row + i * w.row_bytes, w.row_bytes, rows_from(r), n, &y[r * rows + o + i]);
        o += width;
      }
    }
  };
  // Small products are not worth waking the pool.
  if (rows * n * n_rows >= 32768) compute_pool().parallel_for(rows, body);
  else body(0, rows);
}

// q8_0 / q4_0: activations quantized once per product (in parallel for large batches).
void quantized_product(const WeightView& w, const KernelSet& set, const TypeKernels<QRows>& k, const float* x,
                       size_t n_rows, float* y) {
  const size_t cols = size_t(w.cols), nb = cols / kBlock;
  // The calling thread's buffers; the pool's threads reach them through these pointers.
  thread_local std::vector<QBlock> block_buffer;
  thread_local std::vector<float> scale_buffer;
  block_buffer.resize(n_rows * nb);
  scale_buffer.resize(nb * n_rows);
  QBlock* blocks = block_buffer.data();
  float* scales = scale_buffer.data();
  auto quantize = [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) set.quantize(x + r * cols, nb, k.bias_k, blocks + r * nb, scales + r, n_rows);
  };
  if (n_rows >= 4 && n_rows * cols >= 32768) compute_pool().parallel_for(n_rows, quantize);
  else quantize(0, n_rows);
  product(
      w, k, [&](size_t r) { return QRows{blocks + r * nb, scales + r, n_rows}; }, n_rows, nb,
      nb * (sizeof(QBlock) + sizeof(float)), y, [&](size_t o) { return w.row(int64_t(o)); }, true);
}

// f32 activations: row r of x from r on.
auto float_rows(const float* x, size_t cols) {
  return [x, cols](size_t r) { return FRows{x + r * cols, cols}; };
}

// Other types: each weight row dequantized to f32 once per group of activation rows, then the f32
// kernels. The buffer is keyed by the call too: another product may reuse the same address.
void dequantized_product(const WeightView& w, const KernelSet& set, const float* x, size_t n_rows, float* y) {
  static std::atomic<uint64_t> calls{0};
  const uint64_t call = ++calls;
  const size_t cols = size_t(w.cols);
  product(
      w, set.f32, float_rows(x, cols), n_rows, cols, cols * sizeof(float), y,
      [&](size_t o) {
        thread_local std::vector<float> buffer;
        thread_local const uint8_t* buffered = nullptr;
        thread_local uint64_t buffered_call = 0;
        const uint8_t* row = w.row(int64_t(o));
        if (row != buffered || call != buffered_call || buffer.size() != cols) {
          buffer.resize(cols);
          quant::dequantize_row(w.type, row, buffer.data(), int64_t(cols));
          buffered = row;
          buffered_call = call;
        }
        return reinterpret_cast<const uint8_t*>(buffer.data());
      },
      false);
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
    throw std::invalid_argument("matmul kernel set '" + std::string(name) + "' is unknown or needs what this CPU lacks (it runs " +
                                set_names() + ")");
  current_set().store(s);
}

void matmul(const WeightView& w, const float* x, size_t n_rows, float* y) {
  if (n_rows == 0) return;
  const KernelSet& set = *current_set().load();
  const size_t cols = size_t(w.cols);
  switch (w.type) {
    case TH_DTYPE_Q8_0:
      return quantized_product(w, set, set.q8_0, x, n_rows, y);
    case TH_DTYPE_Q4_0:
      return quantized_product(w, set, set.q4_0, x, n_rows, y);
    default:
      break;
  }
  auto row = [&](size_t o) { return w.row(int64_t(o)); };
  switch (w.type) {
    case TH_DTYPE_F32:
      return product(w, set.f32, float_rows(x, cols), n_rows, cols, cols * sizeof(float), y, row, true);
    case TH_DTYPE_F16:
      return product(w, set.f16, float_rows(x, cols), n_rows, cols, cols * sizeof(float), y, row, true);
    default:
      return dequantized_product(w, set, x, n_rows, y);
  }
}

}  // namespace tokenhost
