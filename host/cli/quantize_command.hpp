// `tokenhost quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_K|q6_K`: a quantized copy of a model (a smaller
// draft for it, or a faster model), as llama.cpp's llama-quantize makes.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tokenhost {

struct QuantizeOptions {
  std::string in, out, type;
  std::string chat_template;  // a file whose text becomes the copy's tokenizer.chat_template
};

CLI::App* add_quantize_command(CLI::App& app, QuantizeOptions& options);
int run_quantize(const QuantizeOptions& options);

}  // namespace tokenhost
