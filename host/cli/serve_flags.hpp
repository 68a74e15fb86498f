// `serve`'s flags as llama-server and vLLM users type them. Each writes into the effective manifest: the
// manifest's TOML (the embedded default's without one) before it is read, so that the manifest reader
// checks a flag's value as it checks a file's, with the same messages; a flag overrides the manifest,
// and `serve --print-manifest` prints the result.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tokenhost {

struct ServeFlags {
  std::string model_file;             // -m/--model: the manifest's one model becomes this GGUF file
  std::string alias;                  // -a/--alias/--served-model-name: the one model's [models.X] aliases
  std::optional<uint32_t> ctx_size;   // -c/--ctx-size: every model's context_len
  std::string kv_dtype;               // --kv-dtype: every engine's kv_dtype
  std::vector<std::string> api_keys;  // --api-key (repeatable): [server] api_keys
  std::string api_key_file;           // --api-key-file: [server] api_keys_file
  std::optional<uint32_t> threads;    // -t/--threads: [server] compute_threads
  std::string kvcache;                // --kvcache: every engine's kvcache plugin (its config kept)
  std::string spec;                   // --spec: every engine's spec_decode proposer
  std::string draft_model;            // --draft-model: [models.draft], the proposer spec_decode.draft
  std::optional<uint32_t> max_seqs;   // --parallel/--max-seqs: every engine's max_step_seqs
  std::string host;                   // --host: [server] listen's address
  std::optional<int> port;            // --port: [server] listen's port
  std::optional<int> admin_port;      // --admin-port: [server] admin_listen's port
  std::string log_level;              // --log-level (tokenhost's, before or after `serve`): [server] log_level
  std::optional<int> gpu_layers;      // -ngl/--n-gpu-layers: accepted, and said to mean nothing here
  bool print_manifest = false;        // --print-manifest: print the effective manifest and exit
  std::string record;                 // --record FILE: [server] record_traffic
  bool record_text = false;           // --record-text: [server] record_text
};

// Declares the flags on serve's subcommand.
void add_serve_flags(CLI::App& serve, ServeFlags& f);

// The manifest at path (empty: the embedded default) with the flags written in, as TOML text. Throws
// std::runtime_error naming the flag when it cannot apply (--model on a manifest of several models).
// notes gets a line for each flag that means nothing on this host (-ngl).
std::string effective_manifest(const std::string& path, const ServeFlags& f, std::vector<std::string>& notes);

// The first argument after `serve` in argv that names no option of serve nor of tokenhost itself, with
// the nearest known name: "" when every one is known. CLI11 would otherwise take `--ctx-sise 256`'s
// value as the manifest's path.
std::string unknown_serve_flag(const CLI::App& app, const CLI::App& serve, int argc, const char* const* argv);

}  // namespace tokenhost
