// A small deployment for host tests: one engine on the CPU with the in-tree plugins, ports chosen by
// the system, the fixture plugins searchable.
#pragma once

#include <memory>
#include <string>

#include "harness.hpp"
#include "manifest/deployment.hpp"
#include "server/server.hpp"

namespace tokenhost::testing {

inline std::string test_manifest(const std::string& extra = "", uint32_t n_blocks = 256) {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
http_threads = 32

[models.tiny]
seed = 7
dim = 32
n_layers = 2
n_heads = 4
n_kv_heads = 2
context_len = 256

[engines.main]
model = "tiny"
max_step_tokens = 64
max_step_seqs = 16
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 8, n_blocks = )" +
         std::to_string(n_blocks) + R"( } }
scheduler = { plugin = "scheduler.fifo", config = { max_prefill_chunk = 16 } }
)" + extra;
}

inline std::unique_ptr<Server> make_test_server(const std::string& extra = "", uint32_t n_blocks = 256) {
  return std::make_unique<Server>(read_deployment("test.toml", test_manifest(extra, n_blocks)));
}

inline GenerateRequest request_for(Server& server, const std::string& prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.id = server.next_request_id();
  for (unsigned char c : prompt) r.prompt.push_back(c);
  r.max_tokens = max_tokens;
  return r;
}

}  // namespace tokenhost::testing
