// Two engines in one process, a prefill-heavy one and a decode one (issue 32's compute partitions):
// how much a stream of long prompts on one engine slows the other engine's decoding, when both share
// the process-wide compute pool (their steps take turns on every core) and when each has a partition
// of its own (one core each). Both engines serve the 110M demo model (Q8_0 by default), each under its
// own model name so that the requests reach the engine meant. The decode client sends requests of a
// short prompt one after the other; the prefill client sends long prompts (one token out) until the
// decode client is done. Modes: alone (the decode engine with nothing beside it, shared pool), shared,
// partitioned; their order alternates every run; medians over runs of each run's median.
//
//   bench_partitions [--runs 3] [--decode-requests 6] [--decode-tokens 32] [--prompt-tokens 256] [--type q8_0]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
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

namespace {

enum class Mode { alone, shared, partitioned };
const char* name_of(Mode m) { return m == Mode::alone ? "alone" : m == Mode::shared ? "shared" : "partitioned"; }

std::string manifest(Mode mode, const std::string& type) {
  std::string m = R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
)";
  for (const char* model : {"prefill_model", "decode_model"})
    m += std::string("\n[models.") + model + "]\nsource = \"demo\"\npreset = \"110M\"\ntype = \"" + type + "\"\n";
  if (mode == Mode::partitioned) m += "\n[partitions.prefill]\ncores = [0]\n\n[partitions.decode]\ncores = [1]\n";
  for (const char* engine : {"prefill", "decode"}) {
    if (mode == Mode::alone && std::string(engine) == "prefill") continue;
    m += std::string("\n[engines.") + engine + "]\nmodel = \"" + engine + "_model\"\n";
    if (mode == Mode::partitioned) m += std::string("partition = \"") + engine + "\"\n";
    m += R"(max_step_tokens = 512
max_step_seqs = 16
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 512 } }
scheduler = { plugin = "scheduler.continuous" }
)";
  }
  return m;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

struct RunFigures {
  double decode_ms_per_token = 0;  // median over the decode requests of latency / tokens
  double prefill_tok_s = 0;        // prompt tokens the prefill engine finished per second (0: alone)
};

GenerateRequest request(Server& server, const std::string& model, std::vector<int32_t> prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.id = server.gateway().next_sequence_id();
  r.model = model;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

RunFigures run(Mode mode, const std::string& type, int decode_requests, uint32_t decode_tokens, uint32_t prompt_tokens,
               std::mt19937& rng) {
  Server server(read_deployment("bench_partitions.toml", manifest(mode, type)));
  const uint32_t vocab = server.gateway().find_model("decode_model")->vocab_size;
  auto prompt = [&](uint32_t n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = int32_t(3 + rng() % (vocab - 3));
    return p;
  };
  // One warm request per engine, outside the figures.
  server.gateway().generate(request(server, "decode_model", prompt(8), 4));
  if (mode != Mode::alone) server.gateway().generate(request(server, "prefill_model", prompt(prompt_tokens), 1));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> prefilled{0};
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 64; ++i) prompts.push_back(prompt(prompt_tokens));
  const auto start = Clock::now();
  std::thread prefill_client;
  if (mode != Mode::alone)
    prefill_client = std::thread([&] {
      for (size_t i = 0; !done; ++i) {
        auto r = server.gateway().generate(request(server, "prefill_model", prompts[i % prompts.size()], 1));
        if (r.finish_reason == "error") spdlog::error("prefill request failed: {}", r.error);
        else if (!done) prefilled += prompt_tokens;
      }
    });
  std::vector<double> per_token;
  for (int i = 0; i < decode_requests; ++i) {
    auto t0 = Clock::now();
    auto r = server.gateway().generate(request(server, "decode_model", prompt(8), decode_tokens));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r.finish_reason == "error") spdlog::error("decode request failed: {}", r.error);
    per_token.push_back(ms / double(std::max<size_t>(1, r.tokens.size())));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  done = true;
  if (prefill_client.joinable()) prefill_client.join();
  return {median(per_token), double(prefilled) / seconds};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Two engines in one process: decode speed beside a prefill load, on a shared pool and on partitions"};
  int runs = 3, decode_requests = 6;
  uint32_t decode_tokens = 32, prompt_tokens = 256;
  std::string type = "q8_0";
  app.add_option("--runs", runs, "runs of every mode (alternating order)")->check(CLI::Range(1, 100));
  app.add_option("--decode-requests", decode_requests, "decode requests per run")->check(CLI::Range(1, 1000));
  app.add_option("--decode-tokens", decode_tokens, "tokens each decode request generates")->check(CLI::Range(1, 512));
  app.add_option("--prompt-tokens", prompt_tokens, "tokens of each prefill request's prompt")->check(CLI::Range(1, 1000));
  app.add_option("--type", type, "the 110M demo model's weight type");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "bench_partitions: partitions of one core each need two cores\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::vector<Mode> order = {Mode::alone, Mode::shared, Mode::partitioned};
  std::vector<std::vector<RunFigures>> figures(3);
  for (int r = 0; r < runs; ++r) {
    for (Mode m : order) {
      figures[size_t(m)].push_back(run(m, type, decode_requests, decode_tokens, prompt_tokens, rng));
      std::printf("run %d %-12s decode %.2f ms/token, prefill %.0f tokens/s\n", r + 1, name_of(m), figures[size_t(m)].back().decode_ms_per_token,
                  figures[size_t(m)].back().prefill_tok_s);
      std::fflush(stdout);
    }
    std::reverse(order.begin(), order.end());
  }
  std::printf("\n%-12s %18s %20s\n", "mode", "decode ms/token", "prefill tokens/s");
  for (Mode m : {Mode::alone, Mode::shared, Mode::partitioned}) {
    std::vector<double> decode, prefill;
    for (const auto& f : figures[size_t(m)]) {
      decode.push_back(f.decode_ms_per_token);
      prefill.push_back(f.prefill_tok_s);
    }
    std::printf("%-12s %18.2f %20.0f\n", name_of(m), median(decode), median(prefill));
  }
  return 0;
}
