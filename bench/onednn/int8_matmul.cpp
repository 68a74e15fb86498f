// bench_onednn_int8: oneDNN's int8 matmul beside tokenhost's q8_0 products on the same shapes, in one
// process, alternating: does a library do the products of many rows better?
//
//   OMP_NUM_THREADS=2 TOKENHOST_THREADS=2 bench_onednn_int8 [--rows 1,4,8,16,64,512] [--runs 5]
//                     [--seconds 0.2] [--cols 2048] [--cache-kib 512] [--memory-rows 5632]
//
// oneDNN (Debian's libdnnl-dev 2.6; built only where it is installed) multiplies u8 activations by s8
// weights into f32 with one scale per output column: its int8 GEMM has no place for GGUF's scale per
// 32-element block, so its figure is what a product with per-row scales alone would cost, an upper
// bound for mapping q8_0 onto it (which would need a GEMM per block column, or the weights widened).
// Its weights are reordered once into the layout its primitive asks for (as tokenhost's are packed at
// load), and its activations are given already quantized, while tokenhost's figure includes
// quantizing them: both favour oneDNN. Working sets as bench_matmul_speed's: "cache", one matrix of
// about --cache-kib KiB, and "memory", copies of a --memory-rows matrix cycled, 128 MiB in all. GMAC/s
// per elapsed second, median of --runs runs, each timing both sides for about --seconds each, the
// order reversed every other run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "common/median.hpp"
#include "backends/cpu/matmul.hpp"
#include "base/compute_pool.hpp"
#include "model/quant.hpp"

using namespace tokenhost;
using clock_type = std::chrono::steady_clock;

namespace {

using tokenhost::bench::median;

// Runs f over the copies in turn for about `seconds`; GMAC/s of `macs` per call.
template <class F>
double gmacs(size_t copies, double macs, double seconds, F&& f) {
  size_t calls = 0;
  const auto started = clock_type::now();
  double elapsed = 0;
  do {
    f(calls % copies);
    ++calls;
    elapsed = std::chrono::duration<double>(clock_type::now() - started).count();
  } while (elapsed < seconds);
  return macs * double(calls) / elapsed / 1e9;
}

// The same random weights twice: as q8_0 rows (packed for tokenhost's kernels) and as s8 [cols][rows]
// with a scale per output row, for oneDNN.
struct Weights {
  std::vector<std::vector<uint8_t>> q8;  // per copy
  std::vector<WeightView> views;
  std::vector<std::shared_ptr<void>> packed;
  std::vector<int8_t> s8;  // [cols][rows], one copy: oneDNN's copies are its reordered memories
  std::vector<float> scales;
};

Weights make_weights(int64_t rows, int64_t cols, size_t copies, std::mt19937& rng) {
  Weights w;
  const size_t rb = quant::row_bytes(TH_DTYPE_Q8_0, cols);
  std::vector<uint8_t> q(rb * size_t(rows));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(static_cast<size_t>(cols));
  w.s8.resize(size_t(rows * cols));
  w.scales.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float most = 0;
    for (auto& v : values) v = normal(rng), most = std::max(most, std::abs(v));
    quant::quantize_row(TH_DTYPE_Q8_0, values.data(), &q[size_t(r) * rb], cols);
    w.scales[size_t(r)] = most / 127;
    for (int64_t c = 0; c < cols; ++c)
      w.s8[size_t(c * rows + r)] = int8_t(std::lround(values[size_t(c)] / std::max(w.scales[size_t(r)], 1e-12f)));
  }
  for (size_t i = 0; i < copies; ++i) w.q8.push_back(q);
  for (auto& c : w.q8) {
    w.views.push_back(WeightView{TH_DTYPE_Q8_0, rows, cols, rb, c.data()});
    w.packed.push_back(pack_weight(w.views.back()));
  }
  return w;
}

// oneDNN's product of n_rows u8 rows with every copy of the weights, reordered for its primitive.
struct OneDnnProduct {
  dnnl::matmul prim;
  dnnl::memory src, dst;
  std::vector<dnnl::memory> weights;
  OneDnnProduct(dnnl::engine& eng, dnnl::stream& stream, const Weights& w, int64_t rows, int64_t cols, size_t copies,
                int64_t n_rows, std::mt19937& rng) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a({n_rows, cols}, dt::u8, tag::ab), b_any({cols, rows}, dt::s8, tag::any),
        b_plain({cols, rows}, dt::s8, tag::ab), c({n_rows, rows}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_output_scales(1 << 1, w.scales);  // one scale per output column
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), attr, eng);
    prim = dnnl::matmul(pd);
    src = dnnl::memory(pd.src_desc(), eng);
    dst = dnnl::memory(pd.dst_desc(), eng);
    std::uniform_int_distribution<int> byte(0, 255);
    auto* s = static_cast<uint8_t*>(src.get_data_handle());
    for (int64_t i = 0; i < n_rows * cols; ++i) s[i] = uint8_t(byte(rng));
    dnnl::memory plain(b_plain, eng, const_cast<int8_t*>(w.s8.data()));
    for (size_t i = 0; i < copies; ++i) {
      weights.emplace_back(pd.weights_desc(), eng);
      dnnl::reorder(plain, weights.back()).execute(stream, plain, weights.back());
    }
    stream.wait();
  }
  void run(dnnl::stream& stream, size_t copy) {
    prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights[copy]}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
};

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(std::stoll(s.substr(start, end - start)));
    start = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oneDNN's int8 matmul beside tokenhost's q8_0 products, alternating in one process"};
  std::string rows_arg = "1,4,8,16,64,512";
  int runs = 5;
  double seconds = 0.2;
  int64_t cols = 2048, cache_kib = 512, memory_rows = 5632;
  app.add_option("--rows", rows_arg, "Activation rows per product, comma-separated");
  app.add_option("--runs", runs, "Runs per figure (the median is reported)");
  app.add_option("--seconds", seconds, "Seconds per measurement");
  app.add_option("--cols", cols, "Columns of the matrices (a multiple of 32)");
  app.add_option("--cache-kib", cache_kib, "KiB of the in-cache matrix");
  app.add_option("--memory-rows", memory_rows, "Rows of the matrices streamed from memory");
  CLI11_PARSE(app, argc, argv);

  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  std::mt19937 rng(1);
  std::printf("tokenhost kernels: %s, %zu threads\n\n", matmul_kernels(), compute_pool().threads());
  std::printf("| weights | shape | rows | tokenhost q8_0 GMAC/s | oneDNN u8 x s8 GMAC/s | oneDNN / tokenhost |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const bool from_memory : {false, true}) {
    const int64_t rows = from_memory ? memory_rows
                                     : std::max<int64_t>(4, cache_kib * 1024 / int64_t(quant::row_bytes(TH_DTYPE_Q8_0, cols)));
    const size_t copies =
        from_memory ? std::max<size_t>(1, (size_t(128) << 20) / (quant::row_bytes(TH_DTYPE_Q8_0, cols) * size_t(rows))) : 1;
    const Weights w = make_weights(rows, cols, copies, rng);
    for (const int64_t n_rows : split_ints(rows_arg)) {
      OneDnnProduct theirs(eng, stream, w, rows, cols, copies, n_rows, rng);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(size_t(n_rows * cols)), y(size_t(n_rows * rows));
      for (auto& v : x) v = normal(rng);
      const double macs = double(rows) * double(cols) * double(n_rows);
      std::vector<double> ours_f, theirs_f;
      for (int run = 0; run < runs; ++run) {
        for (int side = 0; side < 2; ++side) {
          if ((side == 0) == (run % 2 == 0))
            ours_f.push_back(gmacs(copies, macs, seconds, [&](size_t c) { matmul(w.views[c], x.data(), size_t(n_rows), y.data()); }));
          else
            theirs_f.push_back(gmacs(copies, macs, seconds, [&](size_t c) { theirs.run(stream, c); }));
        }
      }
      std::printf("| %s | %lldx%lld | %lld | %.1f | %.1f | %.2fx |\n", from_memory ? "memory" : "cache", (long long)rows,
                  (long long)cols, (long long)n_rows, median(ours_f), median(theirs_f), median(theirs_f) / median(ours_f));
      std::fflush(stdout);
    }
  }
  return 0;
}
