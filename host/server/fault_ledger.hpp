// The plugin faults that stopped engines, by plugin id and version, and the quarantine they lead to: a
// plugin whose faults stop engines `quarantine_after` times within `window` is not put into a rebuilt
// engine again (server/engine_supervisor.hpp), so that a broken plugin cannot hold an engine in a
// restart loop. An operator's explicit swap of the plugin lifts its quarantine. Thread-safe.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "metrics/metrics.hpp"
#include "plugin/plugin_fault.hpp"

namespace tokenhost {

class FaultLedger {
 public:
  using Clock = std::chrono::steady_clock;
  // metrics: where tokenhost_plugin_quarantined{plugin, version} goes (may be NULL).
  FaultLedger(uint32_t quarantine_after, std::chrono::seconds window, metrics::Registry* metrics = nullptr);

  // Counts `fault`, which stopped engine `engine`. Returns true when it puts the plugin in quarantine.
  bool record(const PluginFault& fault, const std::string& engine, Clock::time_point now = Clock::now());
  bool quarantined(const std::string& plugin, const std::string& version) const;
  // Lifts the quarantine of every version of `plugin`; returns whether one was lifted.
  bool release(const std::string& plugin);
  // GET /admin/plugins' "faults": each plugin that faulted, with its count, last error and quarantine.
  nlohmann::json json() const;
  uint32_t quarantine_after() const { return quarantine_after_; }

 private:
  struct Entry {
    std::deque<Clock::time_point> recent;  // its faults within the window
    uint64_t total = 0;
    std::string last_error, last_engine, last_call;
    int64_t last_unix = 0;
    bool quarantined = false;
  };
  const uint32_t quarantine_after_;
  metrics::Family* quarantined_ = nullptr;
  const std::chrono::seconds window_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Entry> entries_;  // by (id, version)
};

}  // namespace tokenhost
