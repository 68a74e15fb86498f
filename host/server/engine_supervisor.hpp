// Rebuilds the engines that stop unasked. An engine stops on a fault (a plugin that threw or broke the
// host's checks: actors/engine_vitals.hpp), a kill, or its worker gone; the router has stopped routing to
// it and its requests have ended with the error by then. The supervisor, a thread of the server,
// notices within 100 ms and rebuilds it from its live declaration (what the admin API last made of
// it), after a backoff that doubles with each stop of the same engine within a minute. The plugin whose
// fault stopped it is counted (server/fault_ledger.hpp); a quarantined plugin is not put back: the slot
// falls back to the plugin it held before the admin's last change of it, an optional slot is emptied,
// and a required slot with nothing to fall back to leaves the engine down, quarantined, until an admin
// swap into that slot repairs it (Server::set_slot).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "metrics/metrics.hpp"
#include "server/engine_table.hpp"
#include "server/fault_ledger.hpp"

namespace tokenhost {

struct SupervisionPolicy {
  std::chrono::milliseconds first_retry{200};  // from the stop to the first rebuild ([server] restart_delay_ms)
  std::chrono::milliseconds max_retry{4000};   // the backoff's ceiling (a rebuild within 10 s of a stop)
  std::chrono::seconds recent{60};             // stops within this count for the backoff
  // A step (decision, drafts and computation) that runs longer marks its engine hung ([server]
  // step_deadline_ms).
  std::chrono::milliseconds step_deadline{60000};
};

// The declaration a down engine is rebuilt with: its live one, less the quarantined plugins.
struct RebuildPlan {
  EngineDecl decl;
  std::vector<std::string> changes;  // what differs from the live declaration, for the log
  std::string blocked;               // why it cannot be rebuilt ("" when it can)
};
RebuildPlan plan_rebuild(const EngineHandle& down, const FaultLedger& ledger);

class EngineSupervisor {
 public:
  // Builds an engine from decl, routes to it and puts it in the table in place of `down` (which the
  // caller checks is still there); returns "" or why not. Called from the supervisor's thread.
  using Rebuild = std::function<std::string(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl)>;
  // Takes a hung engine out of routing, its requests ended with why (the engine is abandoned already).
  using Unroute = std::function<void(const std::shared_ptr<EngineHandle>& hung, const std::string& why)>;

  EngineSupervisor(std::shared_ptr<EngineTable> engines, FaultLedger& ledger, SupervisionPolicy policy, Rebuild rebuild,
                   Unroute unroute, metrics::Registry& metrics);
  ~EngineSupervisor();
  EngineSupervisor(const EngineSupervisor&) = delete;
  EngineSupervisor& operator=(const EngineSupervisor&) = delete;

  // Stops watching (joins the thread; a rebuild under way finishes first). Idempotent.
  void stop();
  // What it is doing about down engine `name`, for status and health: {"state": "restarting" |
  // "quarantined", "attempts", "last_error", "retry_in_ms"}; nullopt when it is not handling one.
  std::optional<nlohmann::json> recovery(const std::string& name) const;

 private:
  struct Recovery {
    const EngineHandle* engine = nullptr;  // the down engine this is about (the table may have replaced it)
    bool quarantined = false;
    uint32_t attempts = 0;  // rebuilds tried
    std::string last_error;
    std::chrono::steady_clock::time_point next_try;
  };
  void run();
  void look(std::chrono::steady_clock::time_point now);  // one pass over the table
  std::chrono::milliseconds backoff(const std::string& name, std::chrono::steady_clock::time_point now);

  std::shared_ptr<EngineTable> engines_;
  FaultLedger& ledger_;
  const SupervisionPolicy policy_;
  Rebuild rebuild_;
  Unroute unroute_;
  metrics::Family& hangs_;        // tokenhost_engine_hangs_total{engine}
  metrics::Family& restarts_;     // tokenhost_engine_restarts_total{engine, outcome}
  mutable std::mutex mutex_;      // recoveries_, stops_, stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<std::string, Recovery> recoveries_;  // by engine name
  std::map<std::string, std::vector<std::chrono::steady_clock::time_point>> stops_;  // recent stops, by engine
  std::thread thread_;
};

}  // namespace tokenhost
