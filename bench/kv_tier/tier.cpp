// A KV tier on disk (issue 32, kv_connector.disk): the time to the first token of a long prompt when
// its prefix is computed, when it is in the memory prefix cache, and when the memory cache has lost it
// and the disk tier loads it; then the same prompts on a server restarted on the folder. One engine of
// the 110M demo model (Q8_0 by default) with kvcache.prefix and the disk connector; each run asks a
// fresh prompt (one token out) in the order computed, disk, memory, with the memory cache flushed
// before the computed and the disk ask. The page cache holds the files unless --drop-caches (root)
// empties it before each disk ask. Medians over the runs.
//
//   bench_kv_tier [--runs 5] [--prompt-tokens 480] [--type q8_0] [--kv-dtype f16] [--drop-caches]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "manifest/deployment.hpp"
#include "server/server.hpp"

using namespace tokenhost;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::string manifest(const std::string& type, const std::string& kv_dtype, const std::string& folder) {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"

[models.m]
source = "demo"
preset = "110M"
type = ")" + type + R"("

[engines.main]
model = "m"
kv_dtype = ")" + kv_dtype + R"("
max_step_tokens = 512
max_step_seqs = 16
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 16, n_blocks = 1024 } }
scheduler = { plugin = "scheduler.continuous" }

[[engines.main.kv_connector]]
plugin = "kv_connector.disk"
config = { folder = ")" + folder + R"(" }
)";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

nlohmann::json tier(Server& server) { return server.status()["engines"][0]["kv_connectors"]["layers"][0]; }

// Milliseconds to the one token of prompt (the whole request: its prefill and the first token).
double ttft_ms(Server& server, const std::vector<int32_t>& prompt) {
  GenerateRequest r;
  r.id = server.gateway().next_sequence_id();
  r.model = "m";
  r.prompt = prompt;
  r.max_tokens = 1;
  r.ignore_eos = true;
  const auto t0 = Clock::now();
  auto out = server.gateway().generate(std::move(r));
  if (out.finish_reason == "error") spdlog::error("request failed: {}", out.error);
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void wait_stored(Server& server, uint64_t blocks) {
  for (int i = 0; i < 2000 && tier(server)["stored_blocks"].get<uint64_t>() < blocks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

bool drop_page_cache() {
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "1\n";
  return bool(f);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time to the first token: a prefix computed, in the memory cache, loaded from a disk tier"};
  int runs = 5;
  uint32_t prompt_tokens = 480;
  std::string type = "q8_0", kv_dtype = "f16";
  bool drop = false;
  app.add_option("--runs", runs, "prompts asked (each computed, from disk, from memory)")->check(CLI::Range(1, 100));
  app.add_option("--prompt-tokens", prompt_tokens, "tokens of each prompt")->check(CLI::Range(32, 2000));
  app.add_option("--type", type, "the 110M demo model's weight type");
  app.add_option("--kv-dtype", kv_dtype, "the engine's KV type (f16, q8_0, f32)");
  app.add_flag("--drop-caches", drop, "empty the page cache before each disk ask (needs root)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const fs::path folder = fs::temp_directory_path() / ("bench-kv-tier-" + std::to_string(::getpid()));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<double> computed, disk, memory, restarted, load_gbs;
  uint64_t block_bytes = 0;
  {
    Server server(read_deployment("bench_kv_tier.toml", manifest(type, kv_dtype, folder.string())));
    const uint32_t vocab = server.gateway().find_model("m")->vocab_size;
    std::mt19937 rng(1);
    auto prompt = [&] {
      std::vector<int32_t> p(prompt_tokens);
      for (auto& t : p) t = int32_t(3 + rng() % (vocab - 3));
      return p;
    };
    // Each prompt's whole blocks are saved; all but one token's worth load (the last token is computed).
    const uint64_t saved = prompt_tokens / 16, blocks = (prompt_tokens - 1) / 16;
    ttft_ms(server, prompt());  // warm, outside the figures
    uint64_t stored = saved;
    for (int r = 0; r < runs; ++r) {
      prompts.push_back(prompt());
      wait_stored(server, stored);
      server.flush_prefix_cache("main");
      computed.push_back(ttft_ms(server, prompts.back()));
      wait_stored(server, stored += saved);
      server.flush_prefix_cache("main");
      if (drop && !drop_page_cache()) {
        std::fprintf(stderr, "bench_kv_tier: --drop-caches needs root (writing /proc/sys/vm/drop_caches failed)\n");
        return 2;
      }
      const auto before = tier(server);
      disk.push_back(ttft_ms(server, prompts.back()));
      const auto after = tier(server);
      const double bytes = after["loaded_bytes"].get<double>() - before["loaded_bytes"].get<double>();
      const double seconds = after["load_seconds"].get<double>() - before["load_seconds"].get<double>();
      if (after["loaded_blocks"].get<uint64_t>() - before["loaded_blocks"].get<uint64_t>() != blocks)
        std::fprintf(stderr, "run %d: the disk tier loaded %llu of %llu blocks\n", r + 1,
                     (unsigned long long)(after["loaded_blocks"].get<uint64_t>() - before["loaded_blocks"].get<uint64_t>()),
                     (unsigned long long)blocks);
      if (seconds > 0) load_gbs.push_back(bytes / seconds / 1e9);
      block_bytes = after["loaded_blocks"].get<uint64_t>() > 0 ? uint64_t(after["loaded_bytes"].get<double>() / after["loaded_blocks"].get<double>()) : 0;
      memory.push_back(ttft_ms(server, prompts.back()));
      std::printf("run %d  computed %8.1f ms  disk %8.1f ms  memory %8.1f ms\n", r + 1, computed.back(), disk.back(), memory.back());
      std::fflush(stdout);
    }
  }
  {  // a server restarted on the folder: each prompt's blocks come from disk
    Server server(read_deployment("bench_kv_tier.toml", manifest(type, kv_dtype, folder.string())));
    ttft_ms(server, std::vector<int32_t>(8, 5));  // warm
    for (const auto& p : prompts) {
      if (drop) drop_page_cache();
      restarted.push_back(ttft_ms(server, p));
    }
  }
  fs::remove_all(folder);
  std::printf("\n%u-token prompts, 110M %s, KV %s, blocks of 16 positions (%llu bytes each)%s\n", prompt_tokens, type.c_str(),
              kv_dtype.c_str(), (unsigned long long)block_bytes, drop ? ", page cache dropped before each disk ask" : "");
  std::printf("%-28s %10s\n", "time to first token", "median ms");
  std::printf("%-28s %10.1f\n", "computed", median(computed));
  std::printf("%-28s %10.1f\n", "disk tier", median(disk));
  std::printf("%-28s %10.1f\n", "disk tier after a restart", median(restarted));
  std::printf("%-28s %10.1f\n", "memory prefix cache", median(memory));
  std::printf("disk tier against computed: %.1fx; its loads at %.2f GB/s (median)\n", median(computed) / std::max(1e-9, median(disk)),
              median(load_gbs));
  return 0;
}
