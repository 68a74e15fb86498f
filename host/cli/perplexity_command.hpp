// `tokenhost perplexity`: a model's perplexity on a text file with llama-perplexity's chunking (the
// numbers compare with llama.cpp's), through the same forward pass and plugins the server uses; with
// --kl-divergence-base / --kl-divergence, how far one run's distributions moved from another's (what a
// KV element type, a quantization or a plugin costs in quality). With --url, through a running server.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tokenhost {

struct PerplexityCommand {
  std::string model;
  std::string text_file;
  uint32_t ctx = 512;
  int32_t chunks = -1;
  std::string kv_dtype = "f16";
  std::vector<std::string> sets;  // --set SLOT=PLUGIN / SLOT.KEY=VALUE
  std::string save_base;          // --kl-divergence-base FILE
  std::string compare_base;       // --kl-divergence FILE
  uint32_t prefill_chunk = 512;
  bool json = false;
  // --url: score through a running server's /v1/completions (echo with logprobs, max_tokens 0), its
  // /tokenize giving the tokens: a deployment's whole path (sliding windows, plugins, a cluster)
  // measured; no KL divergence (the API gives the scored token's log-probability, not distributions).
  std::string url;
  std::string served_model;  // --served-model: the request's `model` ("": the server's default)
  std::string api_key;       // --api-key (else $TOKENHOST_API_KEY)
};

CLI::App* add_perplexity_command(CLI::App& app, PerplexityCommand& options);
int run_perplexity_command(const PerplexityCommand& options);

}  // namespace tokenhost
