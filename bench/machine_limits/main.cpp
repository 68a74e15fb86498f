// bench_machine_limits: this machine's int8 multiply-add peak (AVX-512 VNNI on 512- and 256-bit
// registers, AVX2), its f32 FMA peak and its memory bandwidth, at 1 thread and at --threads (default:
// every core), as a markdown table. What the matmul kernels' GMAC/s are a share of
// (bench_matmul_speed --limits). Then, at one thread, what the packed 8-row q4_0 kernel's instructions
// around its vpdpbusd cost (limits.hpp, KernelMix).
//   bench_machine_limits [--threads N] [--runs 5] [--seconds 0.25]
#include <cstdio>
#include <set>
#include <utility>
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
  double peak = 0;  // one thread's VNNI-512 multiply-adds
  for (size_t t : std::set<size_t>{1, threads}) {
    const auto m = tokenhost::bench::measure_machine_limits(t, runs, seconds);
    if (t == 1) peak = m.int8_vnni512;
    std::printf("| %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", t, m.int8_vnni512, m.int8_vnni256, m.int8_avx2,
                m.f32_fma512, m.f32_fma256, m.bandwidth_gbs);
    std::fflush(stdout);
  }
  // The packed 8-row kernel's ingredients, one thread, against the one-thread VNNI-512 peak.
  const auto mix = tokenhost::bench::measure_kernel_mix(runs, seconds);
  if (mix.chains > 0 && peak > 0) {
    std::printf("\n| 1 thread, 512-bit VNNI, operands in L1 | GMAC/s | share of the peak (%.1f) |\n", peak);
    std::printf("|---|---|---|\n");
    const std::pair<const char*, double> rows[] = {
        {"vpdpbusd on 8 activation rows' chunk lines (8 chains)", mix.chains},
        {"+ chains restarted per group from the bias line", mix.restarted},
        {"+ the float step per row and group", mix.float_step},
        {"restarted + q4_0 weights loaded and unpacked per group", mix.q4_0_weights},
        {"all of it: the 8-row q4_0 kernel's mix", mix.kernel}};
    for (const auto& [what, gmacs] : rows) std::printf("| %s | %.1f | %.0f%% |\n", what, gmacs, 100 * gmacs / peak);
  }
  return 0;
}
