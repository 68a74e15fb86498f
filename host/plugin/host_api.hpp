// The host side of the plugin ABI: the th_host_api table given to every plugin, and the host objects
// behind its opaque handles (th_error, th_config, th_host_ctx, th_metric).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>
#include <toml++/toml.h>

#include "metrics/metrics.hpp"

// Collects the messages a plugin reports during one call.
struct th_error {
  std::vector<std::string> messages;
  std::string text() const;  // messages joined with "; "
};

// A plugin's configuration: its manifest defaults merged with the engine's settings.
struct th_config {
  toml::table table;
};

struct th_metric {
  tokenhost::metrics::Family* family;
  th_host_ctx* ctx;
};

// Who an instance is (engine and slot), for log lines and metric labels, and what it allocated.
struct th_host_ctx {
  std::string plugin_id;
  std::string engine;
  std::string slot;
  tokenhost::metrics::Registry* metrics = nullptr;  // NULL: metric_create fails
  std::vector<std::unique_ptr<th_metric>> metric_handles;
  std::mutex alloc_mutex;
  std::map<void*, std::pair<th_device_kind, size_t>> allocations;  // live allocations of the instance
  size_t bytes_allocated = 0;

  ~th_host_ctx();  // frees (and logs) allocations the plugin leaked
};

namespace tokenhost {

// The table handed to every plugin; static, valid for the whole process.
const th_host_api* host_api();

// Human-readable name of a status code ("TH_ERR_UNSUPPORTED").
std::string status_name(th_status status);

}  // namespace tokenhost
