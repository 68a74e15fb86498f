// Models compiled into the binary (models/ in the source tree), so that the embedded default serves a
// real model with nothing downloaded: stories260K (MIT, models/LICENSE).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokenhost {

struct BuiltinModel {
  std::string_view name;      // as a manifest names it: [models.X] source = "builtin", name = "..."
  std::string_view gguf;      // the file's bytes, in the binary's read-only data
  uint32_t context_len;       // the context it was trained at (what it is served at unless told)
  std::string_view licence;   // one line: the licence and where its text is
};

// The builtin model called name, or NULL.
const BuiltinModel* find_builtin_model(std::string_view name);
std::vector<std::string> builtin_model_names();

// Writes model's file into folder (once: a file already there with the same bytes is reused; else it is
// written beside and renamed, never half-written) and returns its path. Throws std::runtime_error
// naming the path when it cannot.
std::string materialize_builtin_model(const BuiltinModel& model, const std::string& folder);

}  // namespace tokenhost
