#include "base/kv_dtypes.hpp"
#include "cli/generate_command.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>

#include <spdlog/spdlog.h>

#include "backends/backend.hpp"
#include "model/quant.hpp"
#include "model/tokenizer.hpp"
#include "plugin/catalog.hpp"
#include "runtime/generator.hpp"
#include "runtime/gguf_model.hpp"

namespace tokenhost {

CLI::App* add_generate_command(CLI::App& app, GenerateOptions& o) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a GGUF model in process, streamed to stdout;\n"
                                             "a summary of prefill and decode tokens/s goes to stderr.");
  cmd->add_option("--model,-m", o.model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--prompt,-p", o.prompt, "Prompt text")->required();
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", o.sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o.sampling.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o.sampling.top_p, "Keep the smallest set holding this probability (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o.sampling.min_p, "Drop tokens less likely than min-p times the best (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o.sampling.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  cmd->add_option("--frequency-penalty", o.sampling.frequency_penalty, "Per-occurrence penalty")->capture_default_str();
  cmd->add_option("--presence-penalty", o.sampling.presence_penalty, "Penalty for any occurrence")->capture_default_str();
  cmd->add_option("--seed", o.sampling.seed, "Random seed")->capture_default_str();
  cmd->add_option("--logprobs", o.sampling.top_logprobs, "Print each token's log-probability and the top N to stderr")
      ->capture_default_str();
  cmd->add_option("--attention", o.attention, "Attention plugin id")->capture_default_str();
  cmd->add_option("--block-size", o.block_size, "KV cache block size (kvcache.paged)")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", o.kv_dtype,
                  "KV cache element type: f16 (half the memory and reads), f32, or q8_0 (a quarter; 8-bit blocks with a scale)")
      ->check(CLI::IsMember(kv_dtype_names()))
      ->capture_default_str();
  cmd->add_option("--moe", o.moe, "MoE plugin id, for a model with experts")->capture_default_str();
  cmd->add_option("--moe-weights", o.moe_weights,
                  "Each token's top-k expert weights (moe.topk's `weights`): model (as the model's\n"
                  "metadata says: qwen2moe keeps the softmax probabilities, the others renormalize),\n"
                  "normalized or softmax")
      ->check(CLI::IsMember({"model", "normalized", "softmax"}))
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o.prefill_chunk, "Prompt tokens per prefill step")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_flag("--no-bos", o.no_bos, "Do not add the beginning-of-sequence token");
  return cmd;
}


int run_generate(const GenerateOptions& o) {
  validate(o.sampling);
  auto started = std::chrono::steady_clock::now();
  LoadedModel model = load_gguf_model(o.model, "model");
  const auto& info = model.weights->spec.info;
  spdlog::info("loaded {} ({}, {} layers, dim {}, {} heads / {} KV heads, vocab {}) in {:.2f} s, {:.1f} MiB of weights mapped",
               o.model, model.weights->spec.architecture, info.n_layers, info.dim, info.n_heads, info.n_kv_heads,
               info.vocab_size, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
               double(model.weights->bytes) / (1 << 20));
  Tokenizer tokenizer(model.tokenizer);
  std::vector<int32_t> prompt = tokenizer.encode(o.prompt, !o.no_bos);
  uint32_t positions = std::min<uint32_t>(info.context_len, uint32_t(prompt.size()) + o.max_tokens + 1);

  PluginCatalog catalog(default_plugin_paths());
  catalog.scan();
  toml::table kv;
  kv.insert("block_size", int64_t(o.block_size));
  kv.insert("n_blocks", int64_t((positions + o.block_size - 1) / o.block_size + 1));
  ModelSpec spec = model.weights->spec;  // as plugins see it: with the KV cache's element type
  spec.info.kv_dtype = kv_dtype_named(o.kv_dtype).value();  // one of --kv-dtype's members
  std::shared_ptr<PluginInstance> moe;
  if (info.n_experts > 0) {
    toml::table gating;
    gating.insert("weights", o.moe_weights);
    moe = instantiate(catalog, o.moe, "generate", spec, gating);
    const bool stated = spec.to_abi().expert_weights_norm == TH_EXPERT_WEIGHTS_NORMALIZED;
    spdlog::info("{} experts per layer, {} used per token: {} (weights = {}; the model's top-k weights are {}), {} experts", info.n_experts,
                 info.n_experts_used, o.moe, o.moe_weights, stated ? "renormalized" : "its softmax probabilities",
                 quant::dtype_name(model.weights->layers[0].experts[0].gate.type));
  }
  const Backend& cpu = *find_backend(TH_DEVICE_CPU);
  Generator generator(cpu.place_weights(model.weights, 0, WeightPlacement{}), instantiate(catalog, o.attention, "generate", spec),
                      instantiate(catalog, "kvcache.paged", "generate", spec, kv), o.prefill_chunk, moe);

  Sampler sampler(o.sampling);
  std::vector<int32_t> history = prompt;
  SampledToken last;
  auto stats = generator.generate(
      prompt, o.max_tokens, tokenizer.eos(),
      [&](const std::vector<float>& logits) {
        last = sampler.sample(logits, history);
        return last.token;
      },
      [&](int32_t token) {
        history.push_back(token);
        if (!tokenizer.is_control(token)) {
          std::string piece = tokenizer.token_text(token);
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        }
        if (o.sampling.top_logprobs > 0) {  // id "text" logprob, then the top N the same way
          auto quoted = [&](int32_t id) {
            std::string q = "\"";
            for (char c : tokenizer.is_control(id) ? tokenizer.spec().tokens.at(size_t(id)) : tokenizer.token_text(id)) {
              if (c == '\n') q += "\\n";
              else if (c == '"' || c == '\\') q += std::string("\\") + c;
              else q += c;
            }
            return q + "\"";
          };
          std::fprintf(stderr, "[%d %s %.4f |", token, quoted(token).c_str(), double(last.logprob));
          for (const auto& t : last.top) std::fprintf(stderr, " %d %s %.4f", t.token, quoted(t.token).c_str(), double(t.logprob));
          std::fprintf(stderr, "]\n");
        }
        return true;
      });
  std::printf("\n");
  std::fprintf(stderr, "prefill: %u tokens in %.3f s (%.1f tokens/s)\ndecode: %u tokens in %.3f s (%.1f tokens/s)\nfinish: %s\n",
               stats.prompt_tokens, stats.prefill_seconds, stats.prompt_tokens / std::max(stats.prefill_seconds, 1e-9),
               stats.generated, stats.decode_seconds,
               stats.generated > 1 ? (stats.generated - 1) / std::max(stats.decode_seconds, 1e-9) : 0.0,
               stats.finish_reason.c_str());
  return 0;
}

}  // namespace tokenhost
