// A deployment manifest as an operator hands it to `tokenhost serve` or `tokenhost check`: read with
// full validation (syntax, keys, types, ranges, models, engines and their devices, plugin ids against
// the catalog, plugin configs, experiments). Anything may be refused with a ManifestError naming
// file:line:column; nothing may crash, and nothing else may escape. After a line "#+", the rest of the
// input is an engine addition as POST /admin/engines hands it over, read against the deployment. Every
// slot the deployment accepted must be accepted again as an admin slot change with its merged config
// (read_slot_change, which prints the config as TOML and reads it back).
//
// What the reader touches, and how this target confines it:
// - The plugin catalog: $TOKENHOST_PLUGIN_PATH is the tree's plugins/ (FUZZ_PLUGIN_DIR), the build
//   and install folders are not compiled in; the catalog reads plugin.toml files only, it opens no
//   library (support/deployment_confine.cpp makes opening one an abort).
// - Files: the manifest "is" SANDBOX/deployment.toml, so relative paths ([models.X] path, [server]
//   plugin_paths and api_keys_file) resolve in the sandbox, a folder of this process's own in $TMPDIR,
//   emptied before every input and removed at exit (or by the next run when the process crashed);
//   $TOKENHOST_CACHE (builtin and demo models) is SANDBOX/cache. An input that
//   holds a string which could lead out of it (absolute, "~", a ".." anywhere) is skipped before the
//   reader sees it. The reader's model writers and loaders check the sandbox again
//   (support/deployment_confine.cpp) and abort on a path outside it: that would be a hole here.
// - Demo models (source = "demo") are written for real; a preset past 4M parameters ("110M", "1.1B":
//   hundreds of MB to GB, valid and documented) is refused as a ManifestError instead of written.
// - Synthetic models allocate no weights while read (only the shape is checked); gguf models are the
//   files in the sandbox, i.e. the builtin and demo models written by the same input.
// - $TOKENHOST_ADMIN_TOKEN is unset; logging is off.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include "manifest/deployment.hpp"

namespace fs = std::filesystem;

namespace tokenhost::fuzz {
fs::path sandbox;  // support/deployment_confine.cpp checks paths against it
}  // namespace tokenhost::fuzz

namespace {

// Whether a string could name a file outside the sandbox.
bool leads_out(std::string_view s) {
  return (!s.empty() && (s.front() == '/' || s.front() == '~')) || s.find("..") != std::string_view::npos;
}

bool any_string_leads_out(const toml::node& node) {
  if (const auto* t = node.as_table()) {
    for (const auto& [key, value] : *t)
      if (any_string_leads_out(value)) return true;
  } else if (const auto* a = node.as_array()) {
    for (const auto& value : *a)
      if (any_string_leads_out(value)) return true;
  } else if (const auto* s = node.as_string()) {
    return leads_out(s->get());
  }
  return false;
}

// A slot's merged config, accepted in the manifest, is accepted as an admin slot change.
void same_as_slot_change(const tokenhost::SlotDecl& decl, const std::string& slot) {
  try {
    (void)tokenhost::read_slot_change(decl.manifest, slot, decl.config, "admin request");
  } catch (const tokenhost::ManifestError& e) {
    std::fprintf(stderr, "fuzz_deployment_manifest: the %s slot's config, accepted in the manifest, is refused as a slot change: %s\n",
                 slot.c_str(), e.what());
    std::abort();
  }
}

void empty_sandbox() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tokenhost::fuzz::sandbox, ec)) fs::remove_all(entry.path(), ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using tokenhost::fuzz::sandbox;
  const std::string prefix = "tokenhost-fuzz-deployment-";
  // The sandboxes of processes that crashed (no exit handler ran) go first.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
    const long pid = std::atol(name.c_str() + prefix.size());
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(entry.path(), ec);
  }
  sandbox = fs::temp_directory_path() / (prefix + std::to_string(::getpid()));
  fs::create_directories(sandbox);
  sandbox = fs::canonical(sandbox);
  ::setenv("TOKENHOST_CACHE", (sandbox / "cache").c_str(), 1);
  ::setenv("TOKENHOST_PLUGIN_PATH", FUZZ_PLUGIN_DIR, 1);
  ::unsetenv("TOKENHOST_ADMIN_TOKEN");
  spdlog::set_level(spdlog::level::off);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(tokenhost::fuzz::sandbox, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t cut = text.find("\n#+\n");
  const std::string_view manifest = text.substr(0, cut);
  // The reader parses the same text with the same parser: what does not parse here fails there too.
  // (An engine addition names no file.)
  try {
    if (any_string_leads_out(toml::parse(manifest))) return 0;
  } catch (const toml::parse_error&) {
  }
  empty_sandbox();
  tokenhost::Deployment d;
  try {
    d = tokenhost::read_deployment((tokenhost::fuzz::sandbox / "deployment.toml").string(), manifest);
  } catch (const tokenhost::ManifestError&) {
    return 0;
  }
  for (const auto& [name, engine] : d.engines) {
    (void)tokenhost::engine_model(d, engine);
    for (const auto& [slot, decl] : engine.slots) same_as_slot_change(decl, slot);
  }
  same_as_slot_change(d.router, "router");
  if (cut != std::string_view::npos) {
    try {
      (void)tokenhost::read_engine_additions(d, "admin request", text.substr(cut + 4));
    } catch (const tokenhost::ManifestError&) {
    }
  }
  return 0;
}
