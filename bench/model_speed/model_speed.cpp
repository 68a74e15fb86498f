// bench_model_speed: single-stream decode and prefill speed of GGUF models on the CPU, with the memory
// bandwidth measured alongside (a STREAM-style triad, same thread count) so that each decode figure
// is reported against its floor: weight bytes read per token / bandwidth; and against a read floor
// from a streaming read (bench::ReadBandwidth, as decode reads, where the triad also writes) measured
// right before and after each decode: each run's share of its own floor, their median reported.
//
//   bench_model_speed --model A.gguf --model B.gguf [--runs 3] [--decode 64] [--prefill 512]
//                     [--attention attention.cpu_flash] [--kernels avx2,avx512vnni] [--batches 4,16]
// --batches adds batched decode, as llama.cpp's llama-batched-bench measures it: B sequences of
// --batch-prompt tokens prefilled in one step, then --batch-generate tokens each, one step of B rows
// per token; the figure is B x generated tokens / decode time (a second table).
// Threads: $TOKENHOST_THREADS (the compute pool's size); run once per thread count. Prints one
// markdown table row per model and matmul kernel set (--kernels: default, the set matmul picks);
// measurements alternate between models, kernel sets (in turn, the order reversed every other run)
// and the triad, median of runs, after one untimed warm-up pass of each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/median.hpp"
#include "machine_limits/limits.hpp"
#include "model/quant.hpp"
#include "plugin/catalog.hpp"
#include "base/allocator_tuning.hpp"
#include "base/compute_pool.hpp"
#include "base/kv_dtypes.hpp"
#include "util/text.hpp"
#include "backends/backend.hpp"
#include "backends/cpu/forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/gguf_model.hpp"
#include "backends/cpu/matmul.hpp"
#include "plugin/step_plugins.hpp"

using namespace tokenhost;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

using tokenhost::bench::median;

// Runs fn(t, begin, end) on `threads` threads, thread t taking its share [begin, end) of [0, n);
// returns the seconds until the last one ends.
template <class Fn>
double on_threads(size_t threads, size_t n, Fn fn) {
  auto started = clock_type::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back([&, t] { fn(t, n * t / threads, n * (t + 1) / threads); });
  for (auto& th : pool) th.join();
  return seconds_since(started);
}

// a[i] = b[i] + s * c[i] over arrays far larger than the caches, split over `threads` threads;
// 3 arrays x 8 bytes... counted as STREAM does: 24 bytes per element (two reads, one write).
double triad_gbs(size_t threads) {
  static std::vector<double> a(size_t(1) << 25), b(a.size(), 1.0), c(a.size(), 2.0);  // 256 MiB each
  const double s = 3.0;
  const double seconds = on_threads(threads, a.size(), [&](size_t, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
  });
  return 24.0 * double(a.size()) / seconds / 1e9;
}

struct ModelRun {
  std::string path;
  LoadedModel model;
  std::unique_ptr<Generator> generator;
  std::shared_ptr<PluginInstance> attention, batch_kvcache;  // for batched decode
  std::shared_ptr<PluginInstance> moe;  // MoE models: moe.topk
  size_t bytes_per_token = 0;
  std::vector<std::vector<double>> decode, prefill;  // per kernel set
  // Per kernel set and run: the read bandwidth measured right before and right after the decode (their
  // mean), and the decode's share of the floor that gives.
  std::vector<std::vector<double>> read, read_share;
  std::vector<std::vector<double>> batched;  // per batch size
  // The attention plugin's share of the decode's time: per kernel set, and per batch size.
  std::vector<std::vector<double>> decode_attention, batched_attention;
  std::vector<double> triad;
};

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct BatchedFigures {
  double tokens_per_second, attention_share;
};

// Decode tokens/s of `batch` sequences together: their prompts in one step, then one step of `batch`
// decode rows per generated token (greedy), the decode steps timed; and the attention plugin's share
// of that time.
BatchedFigures batched_decode(ModelRun& r, size_t batch, uint32_t prompt, uint32_t generate, std::mt19937& rng) {
  const auto& w = *r.model.weights;
  SlotInstances instances;
  instances.set(slot_of(TH_KIND_ATTENTION), r.attention);
  instances.set(slot_of(TH_KIND_KVCACHE), r.batch_kvcache);
  instances.set(slot_of(TH_KIND_MOE), r.moe);
  PluginSeconds seconds;
  const StepPlugins plugins{&instances, &seconds};
  StepBatch step;
  for (size_t s = 0; s < batch; ++s) {
    StepItem item;
    item.seq_id = s + 1;
    item.sample = true;
    for (uint32_t t = 0; t < prompt; ++t) item.tokens.push_back(int32_t(3 + rng() % (w.spec.info.vocab_size - 3)));
    step.items.push_back(std::move(item));
  }
  auto logits = forward_step(w, step, plugins);
  seconds = PluginSeconds{};  // the decode steps' alone
  // The steps alone are timed, as llama-batched-bench times its decode calls (it samples nothing): the
  // greedy choice of 64 rows of a 32,000-token vocabulary, on one thread, was ~5% of a 110M step.
  double elapsed = 0;
  for (uint32_t g = 1; g < generate; ++g) {
    for (size_t s = 0; s < batch; ++s) {
      StepItem& item = step.items[s];
      item.start = prompt + g - 1;
      item.tokens.assign(1, argmax(logits[s]));
    }
    const auto started = clock_type::now();
    logits = forward_step(w, step, plugins);
    elapsed += seconds_since(started);
  }
  const auto& kv = r.batch_kvcache->vtable<th_kvcache_vtable>();
  for (size_t s = 0; s < batch; ++s) kv.seq_free(r.batch_kvcache->handle(), s + 1);
  return {double(batch) * (generate - 1) / elapsed, seconds[slot_of(TH_KIND_ATTENTION)] / elapsed};
}

}  // namespace

int main(int argc, char** argv) {
  tokenhost::tune_allocator_for_serving();  // as the server runs its steps
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
  std::string kv_dtype = "f16";
  app.add_option("--kv-dtype", kv_dtype, "KV cache element type (" + join(kv_dtype_names(), ", ") + "), as an engine's kv_dtype")
      ->check(CLI::IsMember(kv_dtype_names()));
  app.add_option("--kernels", kernel_sets, "Matmul kernel sets to compare, comma-separated")->delimiter(',');
  std::vector<size_t> batches;
  uint32_t batch_prompt = 128, batch_generate = 128;
  app.add_option("--batches", batches, "Batch sizes for batched decode, comma-separated (none by default)")->delimiter(',');
  app.add_option("--batch-prompt", batch_prompt, "Prompt tokens per sequence in batched decode");
  app.add_option("--batch-generate", batch_generate, "Tokens generated per sequence in batched decode");
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
    r.read.resize(kernel_sets.size());
    r.read_share.resize(kernel_sets.size());
    r.decode_attention.resize(kernel_sets.size());
    r.model = load_gguf_model(path, "bench");
    r.model.weights = find_backend(TH_DEVICE_CPU)->place_weights(r.model.weights, 0, WeightPlacement{});  // packed
    const auto& w = *r.model.weights;
    // Read per decoded token: every matrix and norm, but only one row of the embedding (unless the
    // output projection is the embedding itself).
    r.bytes_per_token = w.bytes;
    if (w.output.data != w.embed.data) r.bytes_per_token -= size_t(w.embed.rows) * w.embed.row_bytes;
    if (w.spec.info.n_experts > 0) {  // MoE: a token reads only its experts_used experts of each layer
      size_t experts = 0;
      for (const auto& L : w.layers)
        for (const auto& e : L.experts)
          for (const WeightView* m : {&e.gate, &e.up, &e.down}) experts += size_t(m->rows) * m->row_bytes;
      r.bytes_per_token -= experts - experts / w.spec.info.n_experts * w.spec.info.n_experts_used;
    }
    toml::table kv;
    kv.insert("block_size", 16);
    kv.insert("n_blocks", int64_t((prefill_tokens + decode_tokens + 16) / 16 + 2));
    ModelSpec spec = w.spec;  // as the plugins see it: with the KV cache's element type
    spec.info.kv_dtype = kv_dtype_named(kv_dtype).value();  // one of --kv-dtype's members
    r.attention = instantiate(catalog, attention, "bench", spec);
    if (spec.info.n_experts > 0) r.moe = instantiate(catalog, "moe.topk", "bench", spec);
    r.generator = std::make_unique<Generator>(r.model.weights, r.attention,
                                              instantiate(catalog, "kvcache.paged", "bench", spec, kv), prefill_tokens, r.moe);
    r.batched.resize(batches.size());
    r.batched_attention.resize(batches.size());
    if (!batches.empty()) {
      const size_t most = *std::max_element(batches.begin(), batches.end());
      toml::table bkv;
      bkv.insert("block_size", 16);
      bkv.insert("n_blocks", int64_t(most * ((batch_prompt + batch_generate) / 16 + 2)));
      r.batch_kvcache = instantiate(catalog, "kvcache.paged", "bench", spec, bkv);
    }
    list.push_back(std::move(r));
  }
  std::mt19937 rng(7);
  // One untimed prefill and decode per model and kernel set first (as llama-bench warms up): the first
  // pass faults in the activations, the packed weights' pages and the triad's arrays (the read floor's
  // buffer is written, every page mapped, as it is made).
  triad_gbs(threads);
  const bench::ReadBandwidth read_bandwidth(threads);
  for (auto& r : list) {
    std::vector<int32_t> prompt(prefill_tokens, 3);
    for (const auto& set : kernel_sets) {
      use_matmul_kernels(set);
      r.generator->generate(prompt, 4, -1, Generator::greedy, [](int32_t) { return true; });
    }
  }
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
        // Decode: a short prompt, then decode_tokens tokens one step each, between two measurements of
        // the read bandwidth: the memory's speed moves between minutes, and a floor measured apart
        // from its decode gave shares of 114-338%.
        std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + 8);
        const double read_before = read_bandwidth.gbs();
        stats = r.generator->generate(short_prompt, decode_tokens, -1, Generator::greedy, [](int32_t) { return true; });
        const double read_after = read_bandwidth.gbs();
        r.decode[k].push_back((stats.generated - 1) / stats.decode_seconds);
        r.read[k].push_back((read_before + read_after) / 2);
        r.read_share[k].push_back(r.decode[k].back() * double(r.bytes_per_token) / (r.read[k].back() * 1e9));
        r.decode_attention[k].push_back(stats.decode_attention_seconds / stats.decode_seconds);
        std::fprintf(stderr, "run %d %s %s: prefill %.1f tok/s, decode %.2f tok/s (%.0f%% of it in attention), triad %.1f GB/s, "
                     "read %.1f / %.1f GB/s before / after the decode (%.0f%% of its floor)\n",
                     run + 1, r.path.c_str(), kernel_sets[k].c_str(), r.prefill[k].back(), r.decode[k].back(),
                     100.0 * r.decode_attention[k].back(), r.triad.back(), read_before, read_after, 100.0 * r.read_share[k].back());
      }
      use_matmul_kernels(kernel_sets[0]);
      for (size_t i = 0; i < batches.size(); ++i) {
        const BatchedFigures f = batched_decode(r, batches[i], batch_prompt, batch_generate, rng);
        r.batched[i].push_back(f.tokens_per_second);
        r.batched_attention[i].push_back(f.attention_share);
        std::fprintf(stderr, "run %d %s: batch %zu decode %.1f tok/s (%.0f%% of it in attention)\n", run + 1, r.path.c_str(),
                     batches[i], r.batched[i].back(), 100.0 * f.attention_share);
      }
    }
  }
  std::printf("KV cache %s, attention %s\n\n", kv_dtype.c_str(), attention.c_str());
  std::printf("| model | threads | kernels | prefill %u tok/s | decode tok/s | MB read / token | triad GB/s | floor tok/s | "
              "%% of floor | read GB/s | %% of read floor | attention's share of decode |\n",
              prefill_tokens);
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto& r : list) {
    for (size_t k = 0; k < kernel_sets.size(); ++k) {
      const double triad = median(r.triad), decode = median(r.decode[k]);
      const double floor = triad * 1e9 / double(r.bytes_per_token);
      // The read floor's share: the median of each run's decode against the reads beside it.
      std::printf("| %s | %zu | %s | %.1f | %.2f | %.1f | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.0f%% |\n", r.path.c_str(),
                  threads, kernel_sets[k].c_str(), median(r.prefill[k]), decode, double(r.bytes_per_token) / 1e6, triad,
                  floor, 100.0 * decode / floor, median(r.read[k]), 100.0 * median(r.read_share[k]),
                  100.0 * median(r.decode_attention[k]));
    }
  }
  if (!batches.empty()) {
    std::printf("\n| model | threads | kernels | batch | prompt + generated per sequence | decode tok/s (all sequences) | "
                "attention's share |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (auto& r : list)
      for (size_t i = 0; i < batches.size(); ++i)
        std::printf("| %s | %zu | %s | %zu | %u + %u | %.1f | %.0f%% |\n", r.path.c_str(), threads, kernel_sets[0].c_str(),
                    batches[i], batch_prompt, batch_generate, median(r.batched[i]), 100.0 * median(r.batched_attention[i]));
  }
  return 0;
}
