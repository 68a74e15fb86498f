// `tokenhost generate`: one prompt through a GGUF model in process, streamed to stdout, with a
// summary of prefill and decode speed.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "base/request_defaults.hpp"
#include "runtime/sampling.hpp"

namespace tokenhost {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  uint32_t max_tokens = kCliMaxTokens;
  SamplingParams sampling;
  std::string attention = "attention.cpu_flash";
  uint32_t block_size = 16;
  std::string kv_dtype = "f16";  // the KV cache's elements, as an engine's kv_dtype
  std::string moe = "moe.topk";  // for a model with experts
  std::string moe_weights = "model";  // moe.topk's `weights`: model, normalized or softmax
  uint32_t prefill_chunk = 512;
  bool no_bos = false;
  bool show_logprobs = false;
};

// Adds the generate subcommand and its options to app; run_generate runs it.
CLI::App* add_generate_command(CLI::App& app, GenerateOptions& options);
int run_generate(const GenerateOptions& options);

}  // namespace tokenhost
