// `tokenhost tokenize`: a GGUF file's tokenizer on standard input, loading the vocabulary alone (a
// model file or a vocabulary-only one), as llama.cpp's llama-tokenize does.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tokenhost {

struct TokenizeOptions {
  std::string model;
  bool bos = false;
  bool pieces = false;
  bool no_parse_special = false;
};

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& options);
int run_tokenize(const TokenizeOptions& options);

}  // namespace tokenhost
