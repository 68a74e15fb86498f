// `tokenhost bench`: a load generator for any OpenAI-compatible endpoint (tokenhost, llama-server,
// vLLM, ...). It sends streamed completion requests with synthetic prompts in a closed loop (fixed
// concurrency) or an open loop (Poisson arrivals), and reports throughput and latency (TTFT, ITL,
// end to end) as a table and as JSON. The work is in host/loadgen/.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace tokenhost {

struct BenchOptions {
  std::string url;
  std::string endpoint = "completions";
  std::string model;
  std::string api_key;
  std::string ca_file;    // https: PEM certificates to trust
  bool insecure = false;  // https: any certificate
  uint32_t concurrency = 1;
  double rate = 0;
  uint32_t max_concurrency = 0;
  uint64_t requests = 0;  // 0: 100 unless --duration is given
  double duration_s = 0;
  uint32_t warmup = 0;
  std::string prompt_tokens = "128";
  std::string output_tokens = "128";
  bool ignore_eos = false;
  std::string extra_body;
  double shared_prefix_fraction = 0;
  uint32_t turns = 1;                  // conversation turns (closed loop)
  std::string turn_tokens = "32";      // each later turn's new message
  uint64_t seed = 0;
  bool no_stream = false;
  double timeout_s = 600;
  std::string json;
  bool quiet = false;
  uint32_t repeat = 1;
  std::string prompt_units = "tokens";
  std::string replay;  // --replay FILE: a recording of serve --record
  std::string sweep;   // --sweep NAME=V1,V2,...
  std::string serve;   // --serve MANIFEST: --sweep's base manifest ("" the embedded default)  // --prompt-units: tokens (the server's, through /tokenize) or words  // --repeat: the whole run this many times; figures per run, their median and 95% interval
};

// `tokenhost bench compare BASELINE.json CANDIDATE.json`: figure by figure, with a verdict per row.
struct BenchCompareOptions {
  std::string baseline, candidate;
  double alpha = 0.05;
  double min_effect_pct = 5;
  bool json = false;
};

// Adds the bench subcommand and its options to app; run_bench runs it. Exit status: 0 when every
// measured request succeeded, 1 when some failed or the server could not be reached.
CLI::App* add_bench_command(CLI::App& app, BenchOptions& options, BenchCompareOptions& compare, CLI::App** compare_command);
int run_bench(const BenchOptions& options);
int run_bench_compare(const BenchCompareOptions& options);

}  // namespace tokenhost
