// [breakers] and [overload] of a deployment manifest: the router's circuit breakers per engine and its
// degradation when a model's engines are full (routing/breaker.hpp, routing/overload.hpp say what the
// settings do). A table's presence turns its guard on (unless it says enabled = false); the admin API
// (GET and PATCH /admin/guards) reads and changes both while the server runs, with the same keys.
//
//   [breakers]
//   failures = 5          # consecutive failed (or slow) requests that open an engine's breaker
//   slow_ms = 0           # a first token later than this counts as a failure (0: off)
//   open_ms = 10000       # out of routing this long, then half-open
//   probes = 1            # half-open: requests let through; all must succeed to close it
//
//   [overload]
//   action = "shed"       # or "cheaper": a full model's request goes to a cheaper member of its group
//   classes = [{ name = "batch", shed_at = 0.5 }, { name = "standard", shed_at = 1.0 }, { name = "interactive" }]
//   default_class = "standard"
//   retry_after_s = 1
//   engine_sequences = 0  # an engine's capacity; 0: its max_step_seqs
#pragma once

#include "routing/breaker.hpp"
#include "routing/overload.hpp"
#include "util/toml_reader.hpp"

namespace tokenhost {

struct GuardsDecl {
  routing::BreakerPolicy breakers;
  routing::OverloadPolicy overload;
};

// Reads [breakers] and [overload] of root (either may be absent). Throws ManifestError at the table.
GuardsDecl read_guards(const TomlReader& r, const toml::table& root);

}  // namespace tokenhost
