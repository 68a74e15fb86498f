// Prefill/decode disaggregation against colocated serving (issue 32), two engines either way, one process,
// one core each (compute partitions). A mixed load: decode clients each send a short prompt for a long
// answer, one after another; prompt clients each send a long prompt for a short answer, one after
// another. Colocated: two engines that both prefill and decode behind router.round_robin. Disaggregated:
// a prefill engine and a decode engine behind router.disaggregated, their prompts' blocks moving through
// kv_connector.disk on a tmpfs folder (/dev/shm when there is one). Reported: the decode requests'
// inter-token latency p50 and p99 (every gap between two tokens, stream timestamps), the long prompts'
// time to first token p50, and output tokens/s; the modes alternate, medians over runs.
//
//   bench_disaggregation [--runs 3] [--seconds 12] [--prompt-tokens 480] [--decode-tokens 128]
//                        [--decode-clients 2] [--prompt-clients 1] [--type q8_0]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "manifest/deployment.hpp"
#include "server/server.hpp"

using namespace tokenhost;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::string manifest(bool disaggregated, const std::string& type, const std::string& folder) {
  std::string m = R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"

[models.m]
source = "demo"
preset = "110M"
type = ")" + type + R"("

[partitions.a]
cores = [0]
[partitions.b]
cores = [1]
)";
  const char* names[2] = {disaggregated ? "prefill" : "one", disaggregated ? "decode" : "two"};
  const char* roles[2] = {disaggregated ? "prefill" : "both", disaggregated ? "decode" : "both"};
  for (int i = 0; i < 2; ++i) {
    m += std::string("\n[engines.") + names[i] + "]\nmodel = \"m\"\nrole = \"" + roles[i] + "\"\npartition = \"" + (i == 0 ? "a" : "b") +
         R"("
max_step_tokens = 512
max_step_seqs = 16
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 16, n_blocks = 1024 } }
scheduler = { plugin = "scheduler.continuous" }
)";
    if (disaggregated)
      m += std::string("[[engines.") + names[i] + ".kv_connector]]\nplugin = \"kv_connector.disk\"\nconfig = { folder = \"" + folder + "\" }\n";
  }
  m += disaggregated ? "\n[router]\nplugin = \"router.disaggregated\"\nconfig = { min_prompt_tokens = 256 }\n"
                     : "\n[router]\nplugin = \"router.round_robin\"\n";
  return m;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}
double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

struct Figures {
  double itl_p50_ms = 0, itl_p99_ms = 0, ttft_p50_ms = 0, tokens_per_s = 0;
  size_t long_prompts = 0, decodes = 0;
};

Figures run(bool disaggregated, const std::string& type, const std::string& folder, double seconds, uint32_t prompt_tokens,
            uint32_t decode_tokens, int decode_clients, int prompt_clients, uint64_t seed) {
  Server server(read_deployment("bench_disaggregation.toml", manifest(disaggregated, type, folder)));
  const uint32_t vocab = server.gateway().find_model("m")->vocab_size;
  std::mutex mutex;
  std::vector<double> gaps_ms, ttft_ms;
  std::atomic<uint64_t> tokens{0};
  std::atomic<size_t> long_done{0}, decodes_done{0};
  auto request = [&](std::vector<int32_t> prompt, uint32_t max_tokens, std::shared_ptr<TokenStream> stream) {
    GenerateRequest r;
    r.id = server.gateway().next_sequence_id();
    r.model = "m";
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.stream = std::move(stream);
    return r;
  };
  auto prompt = [&](std::mt19937& rng, uint32_t n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = int32_t(3 + rng() % (vocab - 3));
    return p;
  };
  {  // warm both engines, outside the figures
    std::mt19937 rng(seed);
    for (int i = 0; i < 2; ++i) server.gateway().generate(request(prompt(rng, prompt_tokens), 2, nullptr));
  }
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> clients;
  for (int c = 0; c < decode_clients; ++c)
    clients.emplace_back([&, c] {
      std::mt19937 rng(seed + 100 + uint64_t(c));
      while (Clock::now() < end) {
        auto stream = std::make_shared<TokenStream>();
        GenerateRequest r = request(prompt(rng, 16), decode_tokens, stream);
        std::thread reader([&, stream] {
          size_t seen = 0;
          Clock::time_point last{};
          std::vector<double> mine;
          for (;;) {
            auto u = stream->wait(seen, std::chrono::milliseconds(1000));
            const auto now = Clock::now();
            for (size_t k = 0; k < u.tokens.size(); ++k) {
              if (seen + k > 0) mine.push_back(std::chrono::duration<double, std::milli>(now - last).count());
              last = now;
            }
            seen += u.tokens.size();
            if (u.result) break;
          }
          std::lock_guard lock(mutex);
          gaps_ms.insert(gaps_ms.end(), mine.begin(), mine.end());
        });
        auto out = server.gateway().generate(std::move(r));
        reader.join();
        tokens += out.tokens.size();
        ++decodes_done;
      }
    });
  for (int c = 0; c < prompt_clients; ++c)
    clients.emplace_back([&, c] {
      std::mt19937 rng(seed + 200 + uint64_t(c));
      while (Clock::now() < end) {
        const auto t0 = Clock::now();
        auto out = server.gateway().generate(request(prompt(rng, prompt_tokens), 4, nullptr));
        if (out.finish_reason == "error") spdlog::error("long prompt failed: {}", out.error);
        const double ttft = out.ttft_s ? *out.ttft_s * 1e3 : std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        tokens += out.tokens.size();
        ++long_done;
        std::lock_guard lock(mutex);
        ttft_ms.push_back(ttft);
      }
    });
  const auto started = Clock::now();
  for (auto& t : clients) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  Figures f;
  f.itl_p50_ms = percentile(gaps_ms, 0.5);
  f.itl_p99_ms = percentile(gaps_ms, 0.99);
  f.ttft_p50_ms = median(ttft_ms);
  f.tokens_per_s = double(tokens) / elapsed;
  f.long_prompts = long_done;
  f.decodes = decodes_done;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prefill/decode disaggregation against colocated serving: two engines either way, a mixed load"};
  int runs = 3, decode_clients = 2, prompt_clients = 1;
  double seconds = 12;
  uint32_t prompt_tokens = 480, decode_tokens = 128;
  std::string type = "q8_0";
  app.add_option("--runs", runs, "runs of each mode (alternating)")->check(CLI::Range(1, 50));
  app.add_option("--seconds", seconds, "length of each run's load")->check(CLI::Range(1.0, 600.0));
  app.add_option("--prompt-tokens", prompt_tokens, "tokens of each long prompt")->check(CLI::Range(32, 2000));
  app.add_option("--decode-tokens", decode_tokens, "tokens each decode request generates")->check(CLI::Range(8, 1000));
  app.add_option("--decode-clients", decode_clients, "clients sending decode requests")->check(CLI::Range(1, 64));
  app.add_option("--prompt-clients", prompt_clients, "clients sending long prompts")->check(CLI::Range(1, 64));
  app.add_option("--type", type, "the 110M demo model's weight type");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "bench_disaggregation: two engines on a core each need two cores\n");
    return 2;
  }
  const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path folder = base / ("bench-disaggregation-" + std::to_string(::getpid()));
  std::vector<Figures> colocated, disaggregated;
  bool order = false;
  for (int r = 0; r < runs; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool dis = (k == 0) == order;
      Figures f = run(dis, type, folder.string(), seconds, prompt_tokens, decode_tokens, decode_clients, prompt_clients, uint64_t(r + 1));
      fs::remove_all(folder);
      (dis ? disaggregated : colocated).push_back(f);
      std::printf("run %d %-13s ITL p50 %6.1f ms  p99 %7.1f ms  long-prompt TTFT p50 %7.1f ms  %6.1f tokens/s  (%zu long prompts, %zu decodes)\n",
                  r + 1, dis ? "disaggregated" : "colocated", f.itl_p50_ms, f.itl_p99_ms, f.ttft_p50_ms, f.tokens_per_s, f.long_prompts,
                  f.decodes);
      std::fflush(stdout);
    }
    order = !order;
  }
  auto med = [](const std::vector<Figures>& v, double Figures::*m) {
    std::vector<double> x;
    for (const auto& f : v) x.push_back(f.*m);
    return median(x);
  };
  std::printf("\n%u-token prompts (4 out) beside %d decode clients (16-token prompts, %u out), 110M %s, medians of %d runs\n", prompt_tokens,
              decode_clients, decode_tokens, type.c_str(), runs);
  std::printf("%-14s %12s %12s %20s %12s\n", "mode", "ITL p50 ms", "ITL p99 ms", "long TTFT p50 ms", "tokens/s");
  for (const auto& [name, v] : {std::pair{"colocated", &colocated}, std::pair{"disaggregated", &disaggregated}})
    std::printf("%-14s %12.1f %12.1f %20.1f %12.1f\n", name, med(*v, &Figures::itl_p50_ms), med(*v, &Figures::itl_p99_ms),
                med(*v, &Figures::ttft_p50_ms), med(*v, &Figures::tokens_per_s));
  return 0;
}
