// A small deployment for host tests: one engine on the CPU with the in-tree plugins, ports chosen by
// the system, the fixture plugins searchable.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "manifest/deployment.hpp"
#include "server/server.hpp"

namespace tokenhost::testing {

// The small synthetic model the host tests serve, as a [models.NAME] table.
inline std::string tiny_model_toml(const std::string& name = "tiny") {
  return "\n[models." + name + "]\nseed = 7\ndim = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\ncontext_len = 256\n";
}

inline std::string test_manifest(const std::string& extra = "", uint32_t n_blocks = 256) {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
http_threads = 32
plugins_from_anywhere = true
)" + tiny_model_toml() + R"(
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

// One engine serving a small synthetic MoE model (4 experts, 2 per token) through moe.topk.
inline std::string moe_test_manifest() {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
plugins_from_anywhere = true

[models.moe]
seed = 3
dim = 32
n_layers = 2
n_heads = 4
n_kv_heads = 1
ffn_dim = 24
n_experts = 4
n_experts_used = 2

[engines.main]
model = "moe"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 4, n_blocks = 256 } }
scheduler = { plugin = "scheduler.fifo" }
moe = { plugin = "moe.topk" }
)";
}

inline std::unique_ptr<Server> make_test_server(const std::string& extra = "", uint32_t n_blocks = 256) {
  return std::make_unique<Server>(read_deployment("test.toml", test_manifest(extra, n_blocks)));
}

// The sum of metric `name`'s series with label key="value" (0 when there is none).
inline double metric_sum(Server& server, const std::string& name, const std::string& value, const std::string& key = "plugin") {
  std::istringstream text(server.metrics().prometheus_text());
  double sum = 0;
  for (std::string line; std::getline(text, line);)
    if (line.rfind(name + "{", 0) == 0 && line.find(key + "=\"" + value + "\"") != std::string::npos)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

inline GenerateRequest request_for(Server& server, const std::string& prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.id = server.gateway().next_sequence_id();
  for (unsigned char c : prompt) r.prompt.push_back(c);
  r.max_tokens = max_tokens;
  return r;
}

// Whether, within 30 s, no engine of the server is retiring (a kvcache swap's old engine has drained).
inline bool wait_until_no_engine_retires(Server& server) {
  for (int i = 0; i < 3000 && !server.status()["retiring_engines"].empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return server.status()["retiring_engines"].empty();
}

// Prompts of different lengths, so that sequences join and leave steps at different times.
inline std::vector<std::string> mixed_prompts() {
  std::vector<std::string> p;
  for (int i = 0; i < 12; ++i) p.push_back("prompt number " + std::to_string(i) + std::string(size_t(i * 3), 'x'));
  return p;
}

// Greedy outputs of each of mixed_prompts() run alone: what every later run must reproduce.
inline std::vector<std::vector<int32_t>> outputs_alone(Server& server, uint32_t max_tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : mixed_prompts()) {
    auto r = server.gateway().generate(request_for(server, p, max_tokens));
    if (r.finish_reason != "length" || r.tokens.size() != max_tokens)
      throw std::runtime_error("a request alone did not run to max_tokens: " + r.error);
    out.push_back(r.tokens);
  }
  return out;
}

// `clients` threads each sending mixed_prompts() one after the other until stopped, checking every
// answer against `expected`: what a live server under load looks like to a swap.
class SteadyLoad {
 public:
  SteadyLoad(Server& server, std::vector<std::vector<int32_t>> expected, int clients, uint32_t max_tokens)
      : expected_(std::move(expected)) {
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, &server, c, max_tokens] {
        auto ps = mixed_prompts();
        for (size_t i = size_t(c) % ps.size(); !stop_; i = (i + 1) % ps.size()) {
          auto r = server.gateway().generate(request_for(server, ps[i], max_tokens));
          if (r.finish_reason != "length" || r.tokens != expected_[i]) {
            ++wrong_;
            std::lock_guard lock(mutex_);
            if (first_error_.empty()) first_error_ = r.finish_reason + ": " + r.error;
          }
          ++done_;
        }
      });
    }
  }
  ~SteadyLoad() { stop(); }
  // Returns once `n` more requests have finished.
  void wait_for(int n) {
    int target = done_ + n;
    while (done_ < target) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  int done() const { return done_; }
  int wrong() const { return wrong_; }
  std::string first_error() {
    std::lock_guard lock(mutex_);
    return first_error_;
  }

 private:
  std::vector<std::vector<int32_t>> expected_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> done_{0}, wrong_{0};
  std::mutex mutex_;
  std::string first_error_;
};

}  // namespace tokenhost::testing
