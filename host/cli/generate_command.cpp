#include "cli/generate_command.hpp"

#include "base/kv_dtypes.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>

#include <spdlog/spdlog.h>

#include "cli/in_process.hpp"

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
  InProcessSetup setup;
  setup.model_path = o.model;
  setup.plugins["attention"] = o.attention;
  setup.plugins["moe"] = o.moe;
  setup.configs["moe"].insert("weights", o.moe_weights);
  setup.kv_dtype = o.kv_dtype;
  setup.block_size = o.block_size;
  setup.prefill_chunk = o.prefill_chunk;
  InProcessModel m = load_in_process(setup);
  const Tokenizer& tokenizer = *m.tokenizer;
  std::vector<int32_t> prompt = tokenizer.encode(o.prompt, !o.no_bos);
  // The KV pool holds the prompt and what follows it.
  setup.positions = std::min<uint32_t>(m.model.weights->spec.info.context_len, uint32_t(prompt.size()) + o.max_tokens + 1);
  build_generator(m, setup);
  Generator& generator = *m.generator;

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
  std::fprintf(stderr,
               "prefill: %u tokens in %.3f s (%.1f tokens/s)\ndecode: %u tokens in %.3f s (%.1f tokens/s), %.0f%% of it in "
               "the attention plugin\nfinish: %s\n",
               stats.prompt_tokens, stats.prefill_seconds, stats.prompt_tokens / std::max(stats.prefill_seconds, 1e-9),
               stats.generated, stats.decode_seconds,
               stats.generated > 1 ? (stats.generated - 1) / std::max(stats.decode_seconds, 1e-9) : 0.0,
               100.0 * stats.decode_attention_seconds / std::max(stats.decode_seconds, 1e-9), stats.finish_reason.c_str());
  return 0;
}

}  // namespace tokenhost
