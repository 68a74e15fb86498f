// bench_matmul_speed: GMAC/s of matmul's kernel sets, side by side in one process.
//
//   bench_matmul_speed [--sets avx2,avx512vnni,avx512+packed] [--types q8_0,q4_0,q4_K,q6_K,f16]
//                      [--rows 1,2,3,4,5,6,7,8,16,64,512] [--runs 5] [--seconds 0.2] [--cols 2048]
//                      [--cache-kib 512] [--memory-rows 5632] [--clock wall|cpu] [--limits]
//
// Two working sets per weight type, of --cols columns: "cache", one matrix of about --cache-kib KiB
// that a core's L2 holds between products (the arithmetic alone), and "memory", copies of a
// --memory-rows matrix cycled through, 128 MiB in all, so that each product streams its weights from
// DRAM (decode). Each run times every kernel set in turn (the order alternates between runs) for about
// --seconds each; the table gives the median of the runs. Threads: $TOKENHOST_THREADS (the compute
// pool's size); run once per thread count. --clock cpu divides by the process's CPU time instead of
// the elapsed time: GMAC per CPU-second, a figure per core that time taken by other processes on a
// shared machine does not lower (the pool's spinning counts as busy). A set named SET+packed is SET on
// weights packed once beforehand (pack_weight), as models are at load, where SET has a packed layout.
// --limits first measures the machine (machine_limits/limits.hpp, on the pool's thread count) and adds
// the best set's figure as a share of the type's peak (int8 multiply-adds for the quantized types, f32
// FMAs for f16 and f32) and, for weights streamed from memory, of the memory floor: the GMAC/s a
// product would reach if reading its weights once at the measured bandwidth were all it cost.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/median.hpp"
#include "model/quant.hpp"
#include "base/compute_pool.hpp"
#include "backends/cpu/matmul.hpp"
#include "machine_limits/limits.hpp"

using namespace tokenhost;
using clock_type = std::chrono::steady_clock;

namespace {

using tokenhost::bench::median;

// Copies of one random [rows][cols] matrix of `type`, `total_bytes` in all (at least one).
struct Matrices {
  std::vector<std::vector<uint8_t>> copies;
  std::vector<WeightView> views;
  Matrices(th_dtype type, int64_t rows, int64_t cols, size_t total_bytes, std::mt19937& rng) {
    const size_t rb = quant::row_bytes(type, cols);
    std::vector<uint8_t> packed(rb * size_t(rows));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> values(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : values) v = normal(rng);
      quant::quantize_row(type, values.data(), &packed[size_t(r) * rb], cols);
    }
    const size_t n = std::max<size_t>(1, total_bytes / packed.size());
    for (size_t i = 0; i < n; ++i) copies.push_back(packed);
    for (auto& c : copies) views.push_back(WeightView{type, rows, cols, rb, c.data()});
  }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// GMAC/s of products of n_rows activation rows with the matrices, cycled, for about `seconds`
// (elapsed), per elapsed or CPU second.
double gmacs(const std::vector<WeightView>& views, size_t n_rows, double seconds, bool cpu_clock,
             const std::vector<float>& x, std::vector<float>& y) {
  const WeightView& first = views.front();
  const double macs = double(first.rows) * double(first.cols) * double(n_rows);
  size_t calls = 0, next = 0;
  const auto started = clock_type::now();
  const double cpu_started = cpu_seconds();
  double elapsed = 0;
  do {
    matmul(views[next], x.data(), n_rows, y.data());
    next = (next + 1) % views.size();
    ++calls;
    elapsed = std::chrono::duration<double>(clock_type::now() - started).count();
  } while (elapsed < seconds);
  if (cpu_clock) elapsed = cpu_seconds() - cpu_started;
  return macs * double(calls) / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GMAC/s of the matmul kernel sets, side by side"};
  std::string sets_arg, types_arg = "q8_0,q4_0,q4_K,q6_K,f16", rows_arg = "1,2,3,4,5,6,7,8,16,64,512";
  bool limits_wanted = false;
  int64_t cols = 2048, cache_kib = 512, memory_rows = 5632;
  int runs = 5;
  double seconds = 0.2;
  std::string clock = "wall";
  app.add_option("--sets", sets_arg, "Kernel sets, comma-separated (default: every set this CPU runs)");
  app.add_option("--types", types_arg, "Weight types, comma-separated");
  app.add_option("--rows", rows_arg, "Activation rows per product, comma-separated");
  app.add_option("--runs", runs, "Runs per figure (the median is reported)");
  app.add_option("--seconds", seconds, "Seconds per measurement");
  app.add_option("--cols", cols, "Columns of the matrices (a multiple of 256)");
  app.add_option("--cache-kib", cache_kib, "KiB of the in-cache matrix");
  app.add_option("--memory-rows", memory_rows, "Rows of the matrices streamed from memory");
  app.add_option("--clock", clock, "wall: GMAC per elapsed second; cpu: per CPU-second of the process")
      ->check(CLI::IsMember({"wall", "cpu"}));
  app.add_flag("--limits", limits_wanted, "Measure the machine's peaks first and give each row's best figure as a share of them");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> sets = sets_arg.empty() ? matmul_kernel_sets() : split(sets_arg);
  const std::string suffix = "+packed";
  auto base_set = [&](const std::string& s) {
    const bool packed = s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
    return std::make_pair(packed ? s.substr(0, s.size() - suffix.size()) : s, packed);
  };
  for (const auto& s : sets) use_matmul_kernels(base_set(s).first);  // refuses a set this CPU does not run
  std::vector<size_t> row_counts;
  for (const auto& r : split(rows_arg)) row_counts.push_back(std::stoul(r));
  const size_t threads = compute_pool().threads();
  std::mt19937 rng(1);

  const bool cpu_clock = clock == "cpu";
  bench::MachineLimits limits;
  if (limits_wanted) {
    limits = bench::measure_machine_limits(threads);
    std::printf("limits at %zu threads: int8 %.1f GMAC/s, f32 %.1f GMAC/s, memory %.1f GB/s\n\n", threads, limits.int8_peak(),
                limits.f32_peak(), limits.bandwidth_gbs);
  }
  std::printf("| type | weights | shape | rows | threads |");
  for (const auto& s : sets) std::printf(" %s GMAC/%s |", s.c_str(), cpu_clock ? "CPU-s" : "s");
  for (size_t i = 1; i < sets.size(); ++i) std::printf(" %s / %s |", sets[i].c_str(), sets[0].c_str());
  if (limits_wanted) std::printf(" best %% of peak | best %% of memory floor |");
  std::printf("\n|---|---|---|---|---|");
  for (size_t i = 0; i < 2 * sets.size() - 1 + (limits_wanted ? 2 : 0); ++i) std::printf("---|");
  std::printf("\n");
  for (const auto& type_name : split(types_arg)) {
    const th_dtype type = quant::supported_dtype(type_name);
    if (type < 0) throw std::invalid_argument("--types: unknown type '" + type_name + "'");
    for (const bool from_memory : {false, true}) {
      const int64_t rows = from_memory ? memory_rows
                                       : std::max<int64_t>(4, cache_kib * 1024 / int64_t(quant::row_bytes(type, cols)));
      const Matrices m(type, rows, cols, from_memory ? size_t(128) << 20 : 0, rng);
      std::vector<std::vector<WeightView>> views(sets.size(), m.views);  // per set: packed where asked
      std::vector<std::shared_ptr<void>> packed_copies;
      for (size_t i = 0; i < sets.size(); ++i) {
        const auto [base, packed] = base_set(sets[i]);
        if (!packed) continue;
        use_matmul_kernels(base);
        for (auto& v : views[i]) packed_copies.push_back(pack_weight(v));
      }
      for (size_t n_rows : row_counts) {
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(n_rows * size_t(cols)), y(n_rows * size_t(rows));
        for (auto& v : x) v = normal(rng);
        std::vector<std::vector<double>> figures(sets.size());
        for (int run = 0; run < runs; ++run) {
          for (size_t i = 0; i < sets.size(); ++i) {
            const size_t s = run % 2 == 0 ? i : sets.size() - 1 - i;
            use_matmul_kernels(base_set(sets[s]).first);
            figures[s].push_back(gmacs(views[s], n_rows, seconds, cpu_clock, x, y));
          }
        }
        std::printf("| %s | %s | %lldx%lld | %zu | %zu |", type_name.c_str(), from_memory ? "memory" : "cache",
                    (long long)rows, (long long)cols, n_rows, threads);
        for (const auto& f : figures) std::printf(" %.1f |", median(f));
        for (size_t i = 1; i < sets.size(); ++i) std::printf(" %.2fx |", median(figures[i]) / median(figures[0]));
        if (limits_wanted) {
          double best = 0;
          for (const auto& f : figures) best = std::max(best, median(f));
          const bool integer = type != TH_DTYPE_F16 && type != TH_DTYPE_F32;
          const double peak = integer ? limits.int8_peak() : limits.f32_peak();
          // Reading the weights once per product at the measured bandwidth: n_rows multiply-adds per
          // weight, cols / row_bytes weights per byte.
          const double floor_gmacs = double(n_rows) * limits.bandwidth_gbs * double(cols) / double(quant::row_bytes(type, cols));
          std::printf(" %.1f%% |", 100 * best / peak);
          if (from_memory) std::printf(" %.1f%% |", 100 * best / floor_gmacs);
          else std::printf(" - |");
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
