// The element types an engine's KV cache may hold (an engine's kv_dtype): what the forward pass writes
// and the in-tree attention plugins read, with their names (ggml's, quant::dtype_name). One list for
// the manifest reader, the CLI and the benches.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

#include "model/quant.hpp"

namespace tokenhost {

inline constexpr th_dtype kKvDtypes[] = {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0};

// "f32", "f16", "q8_0".
inline std::vector<std::string> kv_dtype_names() {
  std::vector<std::string> names;
  for (th_dtype t : kKvDtypes) names.emplace_back(quant::dtype_name(t));
  return names;
}

// The KV type called name, or nullopt.
inline std::optional<th_dtype> kv_dtype_named(const std::string& name) {
  for (th_dtype t : kKvDtypes)
    if (name == quant::dtype_name(t)) return t;
  return std::nullopt;
}

}  // namespace tokenhost
