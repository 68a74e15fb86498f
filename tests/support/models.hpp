// Where the tests find the shared model files; a test that needs a missing one skips (skip.hpp).
#pragma once

#include <filesystem>
#include <string>

#include "skip.hpp"

namespace tokenhost::testing {

// $TOKENHOST_MODELS, or ../shared/models beside the checkout.
inline std::string models_dir() {
  if (const char* env = std::getenv("TOKENHOST_MODELS")) return env;
  return std::string(TOKENHOST_SOURCE_DIR) + "/../shared/models";
}

// The path of a model file, or a skip of the whole test run when it is absent.
inline std::string require_model_file(const std::string& name) {
  std::string path = models_dir() + "/" + name;
  if (!std::filesystem::exists(path)) skip_test(path + " not found (set TOKENHOST_MODELS to the folder that holds it)");
  return path;
}

}  // namespace tokenhost::testing
