// bench_model_speed: single-stream decode and prefill speed of GGUF models on the CPU, with the memory
// bandwidth measured alongside (a STREAM-style triad, same thread count) so that each decode figure
// is reported against its floor: weight bytes read per token / bandwidth.
//
//   bench_model_speed --model A.gguf --model B.gguf [--runs 3] [--decode 64] [--prefill 512]
//                     [--attention attention.cpu_flash] [--kernels avx2,avx512vnni]
// Threads: $TOKENHOST_THREADS (the compute pool's size); run once per thread count. Prints one
// markdown table row per model and matmul kernel set (--kernels: default, the set matmul picks);
// measurements alternate between models, kernel sets (in turn, the order reversed every other run)
// and the triad, median of runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "model/quant.hpp"
#include "plugin/catalog.hpp"
#include "runtime/compute_pool.hpp"
#include "runtime/generator.hpp"
#include "runtime/gguf_model.hpp"
#include "runtime/matmul.hpp"

using namespace tokenhost;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// a[i] = b[i] + s * c[i] over arrays far larger than the caches, split over `threads` threads;
// 3 arrays x 8 bytes... counted as STREAM does: 24 bytes per element (two reads, one write).
double triad_gbs(size_t threads) {
  static std::vector<double> a(size_t(1) << 25), b(a.size(), 1.0), c(a.size(), 2.0);  // 256 MiB each
  const double s = 3.0;
  auto started = clock_type::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      size_t begin = a.size() * t / threads, end = a.size() * (t + 1) / threads;
      for (size_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
    });
  }
  for (auto& th : pool) th.join();
  return 24.0 * double(a.size()) / seconds_since(started) / 1e9;
}

struct ModelRun {
  std::string path;
  LoadedModel model;
  std::unique_ptr<Generator> generator;
  size_t bytes_per_token = 0;
  std::vector<std::vector<double>> decode, prefill;  // per kernel set
  std::vector<double> triad;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Single-stream decode and prefill speed of GGUF models, against the memory-bandwidth floor"};
  std::vector<std::string> models;
  int runs = 3;
  uint32_t decode_tokens = 64, prefill_tokens = 512;
  std::string attention = "attention.cpu_flash";
  std::vector<std::string> kernel_sets{matmul_kernels()};
  app.add_option("--model", models, "GGUF model (repeatable)")->required();
  app.add_option("--runs", runs, "Runs per figure (the median is reported)");
  app.add_option("--decode", decode_tokens, "Tokens generated per decode run");
  app.add_option("--prefill", prefill_tokens, "Prompt tokens per prefill run");
  app.add_option("--attention", attention, "Attention plugin");
  app.add_option("--kernels", kernel_sets, "Matmul kernel sets to compare, comma-separated")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  for (const auto& set : kernel_sets) use_matmul_kernels(set);  // refuses a set this CPU lacks, naming it

  const size_t threads = compute_pool().threads();
  PluginCatalog catalog(default_plugin_paths());
  catalog.scan();
  std::vector<ModelRun> list;
  for (const auto& path : models) {
    ModelRun r;
    r.path = path;
    r.decode.resize(kernel_sets.size());
    r.prefill.resize(kernel_sets.size());
    r.model = load_gguf_model(path, "bench");
    const auto& w = *r.model.weights;
    // Read per decoded token: every matrix and norm, but only one row of the embedding (unless the
    // output projection is the embedding itself).
    r.bytes_per_token = w.bytes;
    if (w.output.data != w.embed.data) r.bytes_per_token -= size_t(w.embed.rows) * w.embed.row_bytes;
    toml::table kv;
    kv.insert("block_size", 16);
    kv.insert("n_blocks", int64_t((prefill_tokens + decode_tokens + 16) / 16 + 2));
    r.generator = std::make_unique<Generator>(r.model.weights, instantiate(catalog, attention, "bench", w.spec),
                                              instantiate(catalog, "kvcache.paged", "bench", w.spec, kv), prefill_tokens);
    list.push_back(std::move(r));
  }
  std::mt19937 rng(7);
  for (int run = 0; run < runs; ++run) {
    for (auto& r : list) {
      r.triad.push_back(triad_gbs(threads));
      const uint32_t vocab = r.model.weights->spec.info.vocab_size;
      std::vector<int32_t> prompt(prefill_tokens);
      for (auto& t : prompt) t = int32_t(3 + rng() % (vocab - 3));
      for (size_t i = 0; i < kernel_sets.size(); ++i) {
        const size_t k = run % 2 == 0 ? i : kernel_sets.size() - 1 - i;
        use_matmul_kernels(kernel_sets[k]);
        // Prefill: the prompt in one chunk, timed to the first token.
        auto stats = r.generator->generate(prompt, 1, -1, Generator::greedy, [](int32_t) { return true; });
        r.prefill[k].push_back(prefill_tokens / stats.prefill_seconds);
        // Decode: a short prompt, then decode_tokens tokens one step each.
        std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + 8);
        stats = r.generator->generate(short_prompt, decode_tokens, -1, Generator::greedy, [](int32_t) { return true; });
        r.decode[k].push_back((stats.generated - 1) / stats.decode_seconds);
        std::fprintf(stderr, "run %d %s %s: prefill %.1f tok/s, decode %.2f tok/s, triad %.1f GB/s\n", run + 1,
                     r.path.c_str(), kernel_sets[k].c_str(), r.prefill[k].back(), r.decode[k].back(), r.triad.back());
      }
    }
  }
  std::printf("| model | threads | kernels | prefill %u tok/s | decode tok/s | MB read / token | triad GB/s | floor tok/s | %% of floor |\n",
              prefill_tokens);
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (auto& r : list) {
    for (size_t k = 0; k < kernel_sets.size(); ++k) {
      const double triad = median(r.triad), decode = median(r.decode[k]);
      const double floor = triad * 1e9 / double(r.bytes_per_token);
      std::printf("| %s | %zu | %s | %.1f | %.2f | %.1f | %.1f | %.1f | %.0f%% |\n", r.path.c_str(), threads,
                  kernel_sets[k].c_str(), median(r.prefill[k]), decode, double(r.bytes_per_token) / 1e6, triad,
                  floor, 100.0 * decode / floor);
    }
  }
  return 0;
}
