#include "model/builtin_model.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

// The GGUF files, included whole by the assembler (no hex dump through the compiler). The paths come
// from CMake (TOKENHOST_STORIES260K_GGUF), which also rebuilds this file when they change.
asm(".section .rodata\n"
    ".balign 64\n"
    ".global tokenhost_builtin_stories260k_begin\n"
    "tokenhost_builtin_stories260k_begin:\n"
    ".incbin \"" TOKENHOST_STORIES260K_GGUF "\"\n"
    ".global tokenhost_builtin_stories260k_end\n"
    "tokenhost_builtin_stories260k_end:\n"
    ".previous\n");

extern "C" const char tokenhost_builtin_stories260k_begin[];
extern "C" const char tokenhost_builtin_stories260k_end[];

namespace tokenhost {
namespace {

namespace fs = std::filesystem;

const BuiltinModel kModels[] = {
    {"stories260K",
     std::string_view(tokenhost_builtin_stories260k_begin,
                      size_t(tokenhost_builtin_stories260k_end - tokenhost_builtin_stories260k_begin)),
     512, "MIT (llama2.c's tinyllamas; models/LICENSE in the source tree)"},
};

bool same_bytes(const std::string& path, std::string_view bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) != bytes.size()) return false;
  std::ifstream in(path, std::ios::binary);
  std::string have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return have == bytes;
}

}  // namespace

const BuiltinModel* find_builtin_model(std::string_view name) {
  for (const auto& m : kModels)
    if (m.name == name) return &m;
  return nullptr;
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> out;
  for (const auto& m : kModels) out.emplace_back(m.name);
  return out;
}

std::string materialize_builtin_model(const BuiltinModel& model, const std::string& folder) {
  const std::string path = (fs::path(folder) / ("builtin-" + std::string(model.name) + ".gguf")).string();
  if (same_bytes(path, model.gguf)) return path;
  std::error_code ec;
  fs::create_directories(folder, ec);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(model.gguf.data(), std::streamsize(model.gguf.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      throw std::runtime_error("cannot write the builtin model " + std::string(model.name) + " to " + tmp + ": " +
                               std::strerror(errno));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("cannot write the builtin model " + std::string(model.name) + " to " + path + ": " + ec.message());
  }
  return path;
}

}  // namespace tokenhost
