#include "cli/tokenize_command.hpp"

#include <iostream>
#include <iterator>

#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "runtime/gguf_model.hpp"

namespace tokenhost {

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& o) {
  auto* cmd = app.add_subcommand("tokenize",
                                 "Tokenize standard input with a GGUF file's vocabulary (a model or a vocabulary-only\n"
                                 "file; no weights are read) and print the token ids separated by spaces");
  cmd->add_option("-m,--model", o.model, "GGUF file holding the tokenizer")->required()->check(CLI::ExistingFile);
  cmd->add_flag("--bos", o.bos, "Add the beginning-of-sequence token first (when the vocabulary has one)");
  cmd->add_flag("--pieces", o.pieces, "Print each token's piece on a line of its own instead of the ids (newlines as \\n)");
  cmd->add_flag("--no-parse-special", o.no_parse_special,
                "Tokenize text such as <s> or <|eot_id|> as plain text, not as the special token");
  return cmd;
}

int run_tokenize(const TokenizeOptions& o) {
  auto file = gguf::File::open(o.model);
  const TokenizerSpec spec = read_tokenizer_spec(*file, o.model, 0);
  if (spec.tokens.empty()) {
    std::cerr << o.model << ": no tokenizer (tokenizer.ggml.tokens is missing)\n";
    return 1;
  }
  const Tokenizer tokenizer(spec);  // refuses an unknown model or pre-tokenizer by name
  const std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  const std::vector<int32_t> ids = tokenizer.encode(text, o.bos, !o.no_parse_special);
  if (o.pieces) {
    for (int32_t id : ids) {
      // A control token (BOS, EOS) stands for no text: its vocabulary entry ("<s>") shows which it is.
      std::string piece = tokenizer.token_text(id);
      if (piece.empty() && tokenizer.is_control(id)) piece = tokenizer.spec().tokens.at(size_t(id));
      for (size_t at = piece.find('\n'); at != std::string::npos; at = piece.find('\n', at + 2)) piece.replace(at, 1, "\\n");
      std::cout << piece << "\n";
    }
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  return 0;
}

}  // namespace tokenhost
