// A deployment of stories260K ("full") and its q4_0 copy ("q4") as one public model, group "stories"
// (q4 at cost 0.3 and quality 0.8, full at 1.0), an engine each ("small", "large"), behind the router
// table `router` (its lines: plugin = ..., config = ...); extra is appended.
#pragma once

#include <string>

#include "harness.hpp"
#include "models.hpp"

namespace tokenhost::testing {

inline std::string group_manifest(const std::string& router, const std::string& extra = "") {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugin_paths = [")" + fixture_dir() + R"(/router_v1", ")" + fixture_dir() + R"(/abi_1_7/router"]  # the C router (fixture_plugin.c), current and at 1.7

[models.full]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("
context_len = 512

[models.q4]
source = "gguf"
path = ")" + require_model_file("stories260K-q4_0.gguf") + R"("
context_len = 512

[groups.stories]
members = [{ model = "q4", cost = 0.3, quality = 0.8 }, { model = "full", cost = 1.0 }]

[engines.small]
model = "q4"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 256 } }
scheduler = { plugin = "scheduler.continuous" }

[engines.large]
model = "full"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 256 } }
scheduler = { plugin = "scheduler.continuous" }

[router]
)" + router + "\n" + extra;
}

}  // namespace tokenhost::testing
