// `tokenhost make-model`: writes a GGUF model of any Llama shape with seeded random weights.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "runtime/make_model.hpp"

namespace tokenhost {

struct MakeModelCommand {
  MakeModelOptions options;
  std::string preset;
  std::string type = "f32";
};

CLI::App* add_make_model_command(CLI::App& app, MakeModelCommand& command);
int run_make_model(MakeModelCommand& command);

}  // namespace tokenhost
