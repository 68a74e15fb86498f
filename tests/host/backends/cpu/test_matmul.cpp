// matmul: every weight type against a float64 product of the dequantized weights, on fresh random
// inputs, for one and several activation rows, across the compute pool; and batch invariance. Each
// case runs on every kernel set this CPU has (portable, AVX2, AVX-512 VNNI), each selected in turn.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>

#include "harness.hpp"
#include "kernel_sets.hpp"
#include "model/quant.hpp"
#include "base/compute_pool.hpp"
#include "backends/cpu/matmul.hpp"

namespace cpu_matmul_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// A [rows][cols] matrix of normal values quantized to type, with its view.
struct RandomMatrix {
  std::vector<uint8_t> packed;
  WeightView view;
  RandomMatrix(th_dtype type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> values(static_cast<size_t>(cols));
    const size_t rb = quant::row_bytes(type, cols);
    packed.resize(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : values) v = normal(rng);
      quant::quantize_row(type, values.data(), &packed[size_t(r) * rb], cols);
    }
    view = WeightView{type, rows, cols, rb, packed.data()};
  }
};

std::vector<float> random_rows(size_t n, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * size_t(cols));
  for (auto& v : x) v = normal(rng);
  return x;
}

// x rounded as the integer kernels round activations, per block of 32: scale d = amax / 127, each
// element d * q with q = x / d rounded to nearest, ties to even.
std::vector<double> int8_rounded(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::abs(x[i]));
    const float d = amax / 127.0f, inv = d != 0 ? 1.0f / d : 0.0f;
    for (size_t i = b; i < b + 32; ++i) out[i] = double(d) * std::nearbyint(x[i] * inv);
  }
  return out;
}

// matmul(w, x) against the float64 product of w's dequantized rows with x (with x rounded as the
// integer kernels round it, for the quantized types: then the products themselves are exact), within
// 1e-5 of the sum of |products| (f32 accumulation).
void check_product(const WeightView& w, const std::vector<float>& x, size_t n_rows) {
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> y(n_rows * size_t(rows));
  matmul(w, x.data(), n_rows, y.data());
  const bool int8_activations = w.type == TH_DTYPE_Q8_0 || w.type == TH_DTYPE_Q4_0 || w.type == TH_DTYPE_Q4_K ||
                                w.type == TH_DTYPE_Q6_K;
  const std::vector<double> xd = int8_activations ? int8_rounded(x) : std::vector<double>(x.begin(), x.end());
  std::vector<float> deq(static_cast<size_t>(cols));
  for (int64_t o = 0; o < rows; ++o) {
    quant::dequantize_row(w.type, w.row(o), deq.data(), cols);
    for (size_t r = 0; r < n_rows; ++r) {
      const double* xr = &xd[r * size_t(cols)];
      double exact = 0, magnitude = 0;
      for (int64_t c = 0; c < cols; ++c) {
        exact += double(deq[size_t(c)]) * xr[c];
        magnitude += std::abs(double(deq[size_t(c)]) * xr[c]);
      }
      INFO("output row " << o << ", activation row " << r);
      REQUIRE(std::abs(double(y[r * size_t(rows) + size_t(o)]) - exact) <= 1e-5 * magnitude);
    }
  }
}

// Where a quantized block keeps its fp16 scales: byte offsets in the block.
std::vector<size_t> scale_offsets(th_dtype type) {
  switch (type) {
    case TH_DTYPE_Q8_0:
    case TH_DTYPE_Q4_0:
      return {0};
    case TH_DTYPE_Q4_K:
      return {0, 2};  // d, dmin
    case TH_DTYPE_Q6_K:
      return {208};
    default:
      return {};
  }
}

}  // namespace

TEST_CASE("matmul: each weight type matches a float64 product within its bound", "[matmul]") {
  auto rng = fresh_rng("matmul");
  for_each_kernel_set([&] {
    for (th_dtype type :
         {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_BF16, TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K}) {
      // 1 row (decode), 5 (a four-row tile and one), 12 (tiles only), 37 (enough rows for the kernels
      // on repacked weights, where a set has them); 301 output rows: large enough to run on the pool,
      // odd so that a wider weight tile leaves a row over.
      for (size_t n_rows : {size_t(1), size_t(5), size_t(12), size_t(37)}) {
        INFO(quant::dtype_name(type) << ", " << n_rows << " rows");
        // 32-element block types: 16 blocks (two groups of eight) and a tail of 5 for one row (two
        // pairs and a single block), of 7 for five rows (three pairs and one), none for twelve.
        const bool blocks_of_32 = type == TH_DTYPE_Q8_0 || type == TH_DTYPE_Q4_0;
        const int64_t cols = blocks_of_32 ? 512 + 32 * int64_t(n_rows == 1 ? 5 : n_rows == 5 ? 7 : n_rows == 37 ? 3 : 0) : 512;
        RandomMatrix m(type, 301, cols, rng);
        check_product(m.view, random_rows(n_rows, cols, rng), n_rows);
      }
    }
  });
}

TEST_CASE("matmul: quantized products are right for every weight byte and extreme activations", "[matmul]") {
  // ggml's quantizers never write q8_0's -128 nor use every value of the other types' packed fields
  // alike; files may. Here every byte but the fp16 scales is random. The activations reach +-127
  // after rounding in every block, and some blocks are all zeros (scale 0).
  auto rng = fresh_rng("matmul extremes");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K}) {
      const int64_t rows = 67, cols = 512;
      const size_t rb = quant::row_bytes(type, cols), block = quant::block_bytes(type);
      std::vector<uint8_t> packed(rb * rows);
      for (auto& byte : packed) byte = uint8_t(rng());
      for (size_t at = 0; at < packed.size(); at += block) {
        for (size_t offset : scale_offsets(type)) {
          const float scale = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, -int(rng() % 8));
          const uint16_t h = quant::f32_to_fp16(scale);
          std::memcpy(&packed[at + offset], &h, sizeof h);  // a finite positive scale
        }
      }
      const WeightView w{type, rows, cols, rb, packed.data()};
      for (size_t n_rows : {size_t(1), size_t(4)}) {
        INFO(quant::dtype_name(type) << ", " << n_rows << " rows");
        std::vector<float> x = random_rows(n_rows, cols, rng);
        for (size_t i = 0; i < x.size(); ++i) {
          if (i % 32 == 0) x[i] = -8.0f;     // this block's amax: -127 after rounding
          if (i % 32 == 1) x[i] = 8.0f;      // +127
          if (i / 32 % 8 == 7) x[i] = 0.0f;  // a block of zeros
        }
        check_product(w, x, n_rows);
      }
    }
  });
}

TEST_CASE("matmul: the compute pool covers every index exactly once", "[matmul]") {
  ComputePool pool(3);
  for (size_t grain : {size_t(0), size_t(1), size_t(3), size_t(64)}) {
    for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(1000)}) {
      INFO("grain " << grain << ", n " << n);
      std::vector<std::atomic<int>> hits(n);
      std::atomic<size_t> calls{0}, bad_ranges{0};  // checked here: Catch2 asserts on one thread only
      pool.parallel_for(
          n,
          [&](size_t begin, size_t end) {
            if (begin >= end || (grain != 0 && (begin % grain != 0 || end - begin > grain))) ++bad_ranges;
            ++calls;
            for (size_t i = begin; i < end; ++i) ++hits[i];
          },
          grain);
      REQUIRE(bad_ranges == 0);
      for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
      if (grain != 0 && grain < n) REQUIRE(calls == (n + grain - 1) / grain);
    }
  }
}

TEST_CASE("matmul: a row's outputs are bit-identical whatever rows share its product", "[matmul]") {
  auto rng = fresh_rng("matmul invariance");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_BF16, TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K,
                          TH_DTYPE_Q6_K}) {
      INFO(quant::dtype_name(type));
      // 8 to 25 blocks: every tail of 0..7 blocks after the groups of eight, pairs and single blocks the
      // kernels process, and of 16-block groups 8 short of one to 9 past one (K-quants come in
      // 256-element blocks); 0..39 elements after the float kernels' steps; an odd number of output rows.
      const int64_t rows = 97;
      const bool blocks_of_32 = type == TH_DTYPE_Q8_0 || type == TH_DTYPE_Q4_0;
      for (int64_t tail = 0; tail < (blocks_of_32 ? 18 : 1); ++tail) {
        const int64_t cols = type == TH_DTYPE_Q4_K || type == TH_DTYPE_Q6_K ? 512
                             : blocks_of_32                                   ? 256 + 32 * tail
                                                                              : 256 + int64_t(rng() % 40);
        INFO(cols << " columns");
        // 2, 3, 5, 6 and 7 rows (a group of four and the rest, below the row counts that repack the
        // weights); 8 rows (repacked, every row in one kernel); groups of four and a remainder of 1-3 rows,
        // enough rows for the kernels on repacked weights (whose results must be the one-row kernel's)
        // where a set has them, or passes of 7 and 8 rows (37-39: five passes, 2-4 of them of 8) where
        // it has kernels for up to 8 rows at once.
        RandomMatrix m(type, rows, cols, rng);
        const WeightView& w = m.view;
        for (size_t n_rows : {size_t(2), size_t(3), size_t(5), size_t(6), size_t(7), size_t(8), size_t(37), size_t(38),
                              size_t(39)}) {
          INFO(n_rows << " rows");
          std::vector<float> x = random_rows(n_rows, cols, rng);
          std::vector<float> together(n_rows * static_cast<size_t>(rows)), alone(static_cast<size_t>(rows));
          matmul(w, x.data(), n_rows, together.data());
          for (size_t r = 0; r < n_rows; ++r) {
            matmul(w, &x[r * size_t(cols)], 1, alone.data());
            for (int64_t o = 0; o < rows; ++o) REQUIRE(together[r * size_t(rows) + size_t(o)] == alone[size_t(o)]);
          }
        }
      }
    }
  });
}

TEST_CASE("matmul: weights sharing an input give the results of one product each", "[matmul]") {
  auto rng = fresh_rng("matmul shared input");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K, TH_DTYPE_F32, TH_DTYPE_F16}) {
      const int64_t cols = 512;
      // Q, K and V of a GQA layer: output rows that are not multiples of the tiles, and enough of them
      // that the pool's ranges straddle two weights.
      RandomMatrix q(type, 301, cols, rng), k(type, 77, cols, rng), v(type, 77, cols, rng);
      RandomMatrix other(type == TH_DTYPE_F16 ? TH_DTYPE_Q8_0 : TH_DTYPE_F16, 45, cols, rng);  // runs on its own
      for (size_t n_rows : {size_t(1), size_t(5), size_t(12)}) {
        INFO(quant::dtype_name(type) << ", " << n_rows << " rows");
        const std::vector<float> x = random_rows(n_rows, cols, rng);
        std::vector<float> yq(n_rows * 301), yk(n_rows * 77), yv(n_rows * 77), yo(n_rows * 45);
        matmul({{q.view, yq.data()}, {k.view, yk.data()}, {v.view, yv.data()}, {other.view, yo.data()}}, x.data(),
               n_rows);
        const std::pair<const RandomMatrix*, const std::vector<float>*> products[] = {
            {&q, &yq}, {&k, &yk}, {&v, &yv}, {&other, &yo}};
        for (const auto& [m, together] : products) {
          std::vector<float> alone(together->size());
          matmul(m->view, x.data(), n_rows, alone.data());
          REQUIRE(*together == alone);
        }
        // Same type throughout: one shared product.
        std::vector<float> sq(yq.size()), sk(yk.size());
        matmul({{q.view, sq.data()}, {k.view, sk.data()}}, x.data(), n_rows);
        REQUIRE(sq == yq);
        REQUIRE(sk == yk);
      }
    }
  });
}

TEST_CASE("matmul: every CPU runs the portable set, and an unknown set is refused by name", "[matmul]") {
  const auto sets = matmul_kernel_sets();
  REQUIRE(std::find(sets.begin(), sets.end(), "portable") != sets.end());
  REQUIRE(std::find(sets.begin(), sets.end(), std::string(matmul_kernels())) != sets.end());
  const std::string before = matmul_kernels();
  try {
    use_matmul_kernels("sse9");
    FAIL("an unknown kernel set was accepted");
  } catch (const std::invalid_argument& e) {
    REQUIRE(std::string(e.what()).find("'sse9'") != std::string::npos);
    REQUIRE(std::string(e.what()).find("portable") != std::string::npos);
  }
  REQUIRE(matmul_kernels() == before);
}

TEST_CASE("matmul: results do not depend on where the activation rows lie in memory", "[matmul]") {
  // Rows starting on a cache line are read in place, others copied first: both give the same bits.
  auto rng = fresh_rng("matmul alignment");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0, TH_DTYPE_Q4_K}) {
      INFO(quant::dtype_name(type));
      const int64_t rows = 40, cols = 256;
      const size_t n_rows = 6;
      RandomMatrix m(type, rows, cols, rng);
      const std::vector<float> x = random_rows(n_rows, cols, rng);
      struct alignas(64) Line {
        float v[16];
      };
      std::vector<Line> storage(n_rows * cols / 16 + 1);
      std::vector<float> first(n_rows * rows), y(n_rows * rows);
      for (size_t offset : {size_t(0), size_t(1), size_t(4), size_t(8)}) {
        float* at = storage.data()->v + offset;
        std::copy(x.begin(), x.end(), at);
        matmul(m.view, at, n_rows, offset == 0 ? first.data() : y.data());
        if (offset != 0) REQUIRE(y == first);
      }
    }
  });
}

TEST_CASE("matmul: the x86 SIMD sets' float products agree bit for bit", "[matmul]") {
  // avx2, avx512vnni and avx512 run the same float arithmetic lane for lane (avx512's 512-bit
  // accumulators hold the others' two 256-bit ones), in tiles of different sizes.
  auto rng = fresh_rng("matmul float sets");
  std::vector<std::string> sets;
  for (const std::string& s : matmul_kernel_sets())
    if (s != "portable") sets.push_back(s);
  if (sets.size() < 2) {
    WARN("this CPU runs fewer than two SIMD kernel sets: nothing to compare");
    return;
  }
  struct Restore {
    std::string set = matmul_kernels();
    ~Restore() { use_matmul_kernels(set); }
  } restore;
  for (th_dtype type : {TH_DTYPE_F32, TH_DTYPE_F16}) {
    for (size_t n_rows : {size_t(1), size_t(4), size_t(13)}) {
      const int64_t rows = 103, cols = 256 + int64_t(rng() % 40);
      INFO(quant::dtype_name(type) << ", " << n_rows << " rows, " << cols << " columns");
      RandomMatrix m(type, rows, cols, rng);
      const std::vector<float> x = random_rows(n_rows, cols, rng);
      std::vector<float> first(n_rows * rows), y(n_rows * rows);
      use_matmul_kernels(sets[0]);
      matmul(m.view, x.data(), n_rows, first.data());
      for (size_t i = 1; i < sets.size(); ++i) {
        INFO(sets[i] << " against " << sets[0]);
        use_matmul_kernels(sets[i]);
        matmul(m.view, x.data(), n_rows, y.data());
        REQUIRE(y == first);
      }
    }
  }
}

TEST_CASE("matmul: weights packed once give the products of the weights as they are, bit for bit", "[matmul]") {
  auto rng = fresh_rng("matmul packed weights");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0}) {
      // 8 to 25 blocks: a half and a full last group, one group and some.
      for (int64_t blocks : {8, 13, 16, 24, 25}) {
        RandomMatrix m(type, 67, 32 * blocks, rng), second(type, 29, 32 * blocks, rng);
        WeightView packed = m.view, packed_second = second.view;
        const auto owner = pack_weight(packed), owner_second = pack_weight(packed_second);
        if (!owner) continue;  // this set has no packed layout for the type
        REQUIRE(packed.packed != nullptr);
        REQUIRE(packed.packed_for != nullptr);
        // Every row count up to eight (packed weights take the packed kernels at each: one, two, three,
        // four, then all rows at once), three groups of four, groups and the rest.
        for (size_t n_rows : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(6), size_t(7), size_t(8),
                              size_t(12), size_t(37)}) {
          INFO(quant::dtype_name(type) << ", " << blocks << " blocks, " << n_rows << " rows");
          const std::vector<float> x = random_rows(n_rows, m.view.cols, rng);
          std::vector<float> want(n_rows * 67), got(want.size()), want2(n_rows * 29), got2(want2.size());
          matmul(m.view, x.data(), n_rows, want.data());
          matmul(packed, x.data(), n_rows, got.data());
          REQUIRE(got == want);
          matmul(second.view, x.data(), n_rows, want2.data());
          matmul({{packed, got.data()}, {packed_second, got2.data()}}, x.data(), n_rows);  // shared input
          REQUIRE(got == want);
          REQUIRE(got2 == want2);
        }
      }
    }
  });
}

TEST_CASE("matmul: a few rows against long packed weight rows (a span of columns at a time) give each row's products alone, bit for bit", "[matmul]") {
  auto rng = fresh_rng("matmul long packed rows");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0}) {
      // 5632 columns (11 whole groups of 512, an FFN's down projection) and 4352 (8 and a half): more
      // activation bytes than one pass keeps in L1 from 3 rows on, so the kernels take spans of groups,
      // the last a half group in the second shape; 37 weight rows, more than one pass of weight rows.
      for (int64_t blocks : {176, 136}) {
        RandomMatrix m(type, 37, 32 * blocks, rng);
        WeightView packed = m.view;
        const auto owner = pack_weight(packed);
        if (!owner) continue;  // this set has no packed layout for the type
        for (size_t n_rows : {size_t(3), size_t(5), size_t(8)}) {
          INFO(quant::dtype_name(type) << ", " << blocks << " blocks, " << n_rows << " rows");
          const std::vector<float> x = random_rows(n_rows, m.view.cols, rng);
          std::vector<float> got(n_rows * 37), alone(37);
          matmul(packed, x.data(), n_rows, got.data());
          for (size_t r = 0; r < n_rows; ++r) {
            INFO("row " << r);
            matmul(m.view, x.data() + r * size_t(m.view.cols), 1, alone.data());
            REQUIRE(std::equal(alone.begin(), alone.end(), got.begin() + std::ptrdiff_t(r * 37)));
          }
        }
      }
    }
  });
}

TEST_CASE("matmul: a grouped product gives each group's rows the products of its own weights, bit for bit", "[matmul][moe]") {
  auto rng = fresh_rng("matmul grouped");
  for_each_kernel_set([&] {
    for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_Q4_K, TH_DTYPE_Q6_K, TH_DTYPE_F32, TH_DTYPE_F16,
                          TH_DTYPE_BF16}) {
      // Six experts' gate and up (an odd number of output rows); groups of 0 (unread: its weights are
      // empty views), 1, 2, 5, 9 and 40 rows: the one-row kernels, the groups of four, and the packed
      // kernels where the set has them.
      const int64_t cols = 512, rows = 67;
      const size_t sizes[] = {1, 0, 2, 40, 5, 9};
      const size_t n_groups = std::size(sizes);
      std::vector<RandomMatrix> gates, ups;
      std::vector<WeightView> weights;  // [group][gate, up]
      std::vector<MatmulGroup> groups;
      size_t n_rows = 0;
      for (size_t g = 0; g < n_groups; ++g) {
        gates.emplace_back(type, rows, cols, rng);
        ups.emplace_back(type, rows + 3, cols, rng);
      }
      for (size_t g = 0; g < n_groups; ++g) {
        weights.push_back(sizes[g] == 0 ? WeightView{} : gates[g].view);
        weights.push_back(sizes[g] == 0 ? WeightView{} : ups[g].view);
      }
      for (size_t g = 0; g < n_groups; ++g) {
        groups.push_back({&weights[2 * g], n_rows, sizes[g]});
        n_rows += sizes[g];
      }
      INFO(quant::dtype_name(type));
      const std::vector<float> x = random_rows(n_rows, cols, rng);
      std::vector<float> y_gate(n_rows * rows, -1.0f), y_up(n_rows * (rows + 3), -1.0f);
      float* const y[] = {y_gate.data(), y_up.data()};
      grouped_matmul(groups.data(), n_groups, 2, x.data(), y);
      for (size_t g = 0; g < n_groups; ++g) {
        if (sizes[g] == 0) continue;
        INFO("group " << g << ", " << sizes[g] << " rows");
        const size_t r0 = groups[g].row0;
        std::vector<float> want(sizes[g] * (rows + 3));
        matmul(gates[g].view, &x[r0 * cols], sizes[g], want.data());
        REQUIRE(std::equal(want.begin(), want.begin() + long(sizes[g] * rows), y_gate.begin() + long(r0 * rows)));
        matmul(ups[g].view, &x[r0 * cols], sizes[g], want.data());
        REQUIRE(std::equal(want.begin(), want.end(), y_up.begin() + long(r0 * (rows + 3))));
        // and one row alone (batch invariance across the groups)
        std::vector<float> alone(rows);
        matmul(gates[g].view, &x[(r0 + sizes[g] - 1) * cols], 1, alone.data());
        REQUIRE(std::equal(alone.begin(), alone.end(), y_gate.begin() + long((r0 + sizes[g] - 1) * rows)));
      }
    }
  });
}

}  // namespace cpu_matmul_tests
