#include "cli/make_model_command.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "model/quant.hpp"
#include "util/progress.hpp"

namespace tokenhost {

CLI::App* add_make_model_command(CLI::App& app, MakeModelCommand& c) {
  auto* cmd = app.add_subcommand("make-model", "Write a GGUF model of any Llama shape (dense or MoE, with an optional shared\n"
                                               "expert) with seeded random weights of one element type and a working tokenizer,\n"
                                               "for tests and benchmarks.");
  MakeModelOptions& o = c.options;
  cmd->add_option("output", o.path, "GGUF file to write")->required();
  cmd->add_option("--preset", c.preset, "Start from a shape: stories260K, 110M, 1.1B");
  cmd->add_option("--type", c.type, "Element type of the matrices: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Random seed")->capture_default_str();
  cmd->add_option("--scale", o.scale, "Standard deviation of the weights (each ~ normal(0, scale); norms ~ 1)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--dim", o.shape.dim, "Embedding width");
  cmd->add_option("--layers", o.shape.n_layers, "Transformer blocks");
  cmd->add_option("--heads", o.shape.n_heads, "Query heads");
  cmd->add_option("--kv-heads", o.shape.n_kv_heads, "Key/value heads");
  cmd->add_option("--ffn", o.shape.ffn_dim, "Feed-forward width (per expert)");
  cmd->add_option("--vocab", o.shape.vocab_size, "Vocabulary size (>= 259)");
  cmd->add_option("--context", o.shape.context_len, "Context length");
  cmd->add_option("--experts", o.shape.n_experts, "Experts per MoE layer (0 = dense)");
  cmd->add_option("--experts-used", o.shape.n_experts_used, "Experts per token");
  cmd->add_option("--shared-experts", o.shape.n_shared_experts,
                  "Shared experts per MoE layer: a SwiGLU expert every token runs, added to the\n"
                  "routed experts' output (blk.N.ffn_{gate,up,down}_shexp)")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--shared-ffn", o.shape.shared_ffn_dim, "Feed-forward width of the shared expert (default: --ffn)");
  cmd->add_flag("--shared-gate", o.shape.shared_expert_gate,
                "Scale the shared expert's output per token by sigmoid(w . x) (blk.N.ffn_gate_inp_shexp,\n"
                "as Qwen2-MoE)");
  cmd->add_flag("--tied", o.shape.tied_output, "No output.weight: the embedding is reused");
  cmd->add_option("--arch", o.shape.architecture,
                  "llama, qwen2, qwen2moe (needs --experts, --experts-used, --shared-experts 1 and --shared-gate), "
                  "qwen3 (per-head query and key RMS norms, NEOX RoPE) or qwen3moe (qwen3 with --experts and --experts-used)")
      ->capture_default_str();
  return cmd;
}

int run_make_model(MakeModelCommand& c) {
  if (!c.preset.empty()) {
    // Explicit shape options given on the command line override the preset's.
    ModelShape preset = model_shape_preset(c.preset);
    ModelShape given = c.options.shape, defaults;
    auto pick = [](auto given_v, auto default_v, auto preset_v) { return given_v != default_v ? given_v : preset_v; };
    c.options.shape.dim = pick(given.dim, defaults.dim, preset.dim);
    c.options.shape.n_layers = pick(given.n_layers, defaults.n_layers, preset.n_layers);
    c.options.shape.n_heads = pick(given.n_heads, defaults.n_heads, preset.n_heads);
    c.options.shape.n_kv_heads = pick(given.n_kv_heads, defaults.n_kv_heads, preset.n_kv_heads);
    c.options.shape.ffn_dim = pick(given.ffn_dim, defaults.ffn_dim, preset.ffn_dim);
    c.options.shape.vocab_size = pick(given.vocab_size, defaults.vocab_size, preset.vocab_size);
    c.options.shape.context_len = pick(given.context_len, defaults.context_len, preset.context_len);
    c.options.shape.tied_output = given.tied_output || preset.tied_output;
  }
  const th_dtype type = quant::supported_dtype(c.type, true);
  if (type < 0) throw std::invalid_argument("unknown --type '" + c.type + "' (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k)");
  c.options.type = type;
  auto started = std::chrono::steady_clock::now();
  Progress progress("making tensors");
  c.options.progress = [&progress](double f) { progress(f); };
  try {
    make_model(c.options);
  } catch (...) {
    progress.done();  // the error on a line of its own, not after the progress
    throw;
  }
  progress.done();
  const auto& s = c.options.shape;
  std::string experts;
  if (s.n_experts) experts = ", " + std::to_string(s.n_experts) + " experts";
  if (s.n_shared_experts)
    experts += " + a shared expert (ffn " + std::to_string(s.shared_ffn_dim ? s.shared_ffn_dim : s.ffn_dim) +
               (s.shared_expert_gate ? ", gated)" : ")");
  std::fprintf(stderr, "%s: %s, %u layers, dim %u, %u/%u heads, ffn %u, vocab %u%s, %s, seed %llu: %.1f MiB in %.1f s\n",
               c.options.path.c_str(), s.architecture.c_str(), s.n_layers, s.dim, s.n_heads, s.n_kv_heads, s.ffn_dim,
               s.vocab_size, experts.c_str(), c.type.c_str(),
               (unsigned long long)c.options.seed, double(std::filesystem::file_size(c.options.path)) / (1 << 20),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return 0;
}

}  // namespace tokenhost
