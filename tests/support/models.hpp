// Where the tests find the shared model files, and how a test that needs a missing one skips: it
// says SKIPPED and why, and exits with 77, which CTest reports as skipped (never as passed).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tokenhost::testing {

// $TOKENHOST_MODELS, or ../shared/models beside the checkout.
inline std::string models_dir() {
  if (const char* env = std::getenv("TOKENHOST_MODELS")) return env;
  return std::string(TOKENHOST_SOURCE_DIR) + "/../shared/models";
}

// The path of a model file, or a skip of the whole test run when it is absent.
inline std::string require_model_file(const std::string& name) {
  std::string path = models_dir() + "/" + name;
  if (!std::filesystem::exists(path)) {
    std::printf("SKIPPED: %s not found (set TOKENHOST_MODELS to the folder that holds it)\n", path.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  return path;
}

}  // namespace tokenhost::testing
