// bench_machine_limits: this machine's int8 multiply-add peak (AVX-512 VNNI on 512- and 256-bit
// registers, AVX2), its f32 FMA peak and its memory bandwidth, at 1 thread and at --threads (default:
// every core), as a markdown table. What the matmul kernels' GMAC/s are a share of
// (bench_matmul_speed --limits).
//   bench_machine_limits [--threads N] [--runs 5] [--seconds 0.25]
#include <cstdio>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>

#include "machine_limits/limits.hpp"

int main(int argc, char** argv) {
  CLI::App app{"The int8 and f32 multiply-add peaks and the memory bandwidth of this machine"};
  size_t threads = std::thread::hardware_concurrency();
  int runs = 5;
  double seconds = 0.25;
  app.add_option("--threads", threads, "Threads for the whole-machine figures (default: every core)");
  app.add_option("--runs", runs, "Runs per figure (the median is reported)");
  app.add_option("--seconds", seconds, "Seconds per run");
  CLI11_PARSE(app, argc, argv);
  std::printf("| threads | int8 VNNI-512 GMAC/s | int8 VNNI-256 GMAC/s | int8 AVX2 GMAC/s | f32 FMA-512 GMAC/s | f32 FMA-256 GMAC/s | read GB/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (size_t t : std::set<size_t>{1, threads}) {
    const auto m = tokenhost::bench::measure_machine_limits(t, runs, seconds);
    std::printf("| %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", t, m.int8_vnni512, m.int8_vnni256, m.int8_avx2,
                m.f32_fma512, m.f32_fma256, m.bandwidth_gbs);
    std::fflush(stdout);
  }
  return 0;
}
