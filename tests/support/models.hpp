// Where the tests find the shared model files; a test that needs a missing one skips (skip.hpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "skip.hpp"

namespace tokenhost::testing {

// $TOKENHOST_MODELS when set; else the tree's models/ (stories260K and its reference text), then
// ../shared/models beside the checkout (the llama2.c files too).
inline std::vector<std::string> model_dirs() {
  if (const char* env = std::getenv("TOKENHOST_MODELS")) return {env};
  return {std::string(TOKENHOST_SOURCE_DIR) + "/models", std::string(TOKENHOST_SOURCE_DIR) + "/../shared/models"};
}

// The path of a model file, or a skip of the whole test run when it is absent.
inline std::string require_model_file(const std::string& name) {
  for (const auto& dir : model_dirs())
    if (std::filesystem::exists(dir + "/" + name)) return dir + "/" + name;
  skip_test(name + " not found in " + model_dirs().front() + (model_dirs().size() > 1 ? " nor " + model_dirs().back() : "") +
            " (set TOKENHOST_MODELS to the folder that holds it)");
}

}  // namespace tokenhost::testing
