#include "server/fault_ledger.hpp"

#include <spdlog/spdlog.h>

namespace tokenhost {

FaultLedger::FaultLedger(uint32_t quarantine_after, std::chrono::seconds window, metrics::Registry* metrics)
    : quarantine_after_(quarantine_after), window_(window) {
  if (metrics != nullptr)
    quarantined_ = &metrics->family(metrics::Type::gauge, "tokenhost_plugin_quarantined",
                                    "1 while the plugin is quarantined (its faults stopped engines repeatedly; GET /admin/plugins says why)",
                                    {"plugin", "version"});
}

bool FaultLedger::record(const PluginFault& fault, const std::string& engine, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_[{fault.plugin, fault.version}];
  e.recent.push_back(now);
  while (!e.recent.empty() && now - e.recent.front() > window_) e.recent.pop_front();
  ++e.total;
  e.last_error = fault.what();
  e.last_engine = engine;
  e.last_call = fault.call;
  e.last_unix = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (e.quarantined || e.recent.size() < quarantine_after_) return false;
  e.quarantined = true;
  if (quarantined_) quarantined_->set({fault.plugin, fault.version}, 1);
  spdlog::error("plugin {} {} quarantined: {} faults within {} s stopped engines (last on engine {}: {}); rebuilt engines do "
                "without it until an operator swaps a plugin into its slot",
                fault.plugin, fault.version, e.recent.size(), window_.count(), engine, e.last_error);
  return true;
}

bool FaultLedger::quarantined(const std::string& plugin, const std::string& version) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find({plugin, version});
  return it != entries_.end() && it->second.quarantined;
}

bool FaultLedger::release(const std::string& plugin) {
  std::lock_guard lock(mutex_);
  bool any = false;
  for (auto& [key, e] : entries_)
    if (key.first == plugin && e.quarantined) {
      e.quarantined = false;
      e.recent.clear();
      if (quarantined_) quarantined_->set({key.first, key.second}, 0);
      any = true;
    }
  return any;
}

nlohmann::json FaultLedger::json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, e] : entries_)
    out.push_back({{"plugin", key.first},
                   {"version", key.second},
                   {"faults", e.total},
                   {"recent_faults", e.recent.size()},
                   {"quarantined", e.quarantined},
                   {"last_error", e.last_error},
                   {"last_engine", e.last_engine},
                   {"last_call", e.last_call},
                   {"last_unix", e.last_unix}});
  return out;
}

}  // namespace tokenhost
