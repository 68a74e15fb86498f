// Degradation when a model's engines are full: requests of the lower priority classes are shed first
// (503 with Retry-After and the reason) or sent to a cheaper model of the same public name, so that
// the highest class keeps its latency. The policy is the manifest's [overload] table, changed live
// through the admin API.
//
// An engine is full for a class when the sequences the router has in flight there reach the class's
// shed_at times the engine's capacity (its max_step_seqs, or the policy's engine_sequences); a model
// is full for the class when every engine of it the router may route to is. The last class is never
// shed. A request names its class with the `tokenhost.class` extension; one that names none, or a
// class the policy does not list, is of default_class.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tokenhost::metrics {
class Family;
class Registry;
}  // namespace tokenhost::metrics

namespace tokenhost::routing {

struct OverloadClass {
  std::string name;
  double shed_at = 0;  // fraction of capacity (0.05..100); 0 for the last class (never shed)
};

struct OverloadPolicy {
  bool enabled = false;
  // "shed": the request is refused; "cheaper": it goes to a member of its group that costs less and is
  // not full for its class (refused when none is).
  std::string action = "shed";
  std::vector<OverloadClass> classes;  // lowest first; at least two when enabled
  std::string default_class;           // one of classes
  uint32_t retry_after_s = 1;          // the refusal's Retry-After, 1..3600
  uint32_t engine_sequences = 0;       // an engine's capacity when set (1..65536), else its max_step_seqs

  nlohmann::json json() const;
  // The class a request's `tokenhost.class` falls in: its index in classes.
  size_t class_of(const std::string& request_class) const;
  // The class's threshold (0: never shed).
  double shed_at(size_t cls) const { return cls + 1 < classes.size() ? classes[cls].shed_at : 0.0; }
};

// The policy with `change` applied ({"enabled": true, "action": "cheaper", "classes": [{"name":
// "batch", "shed_at": 0.5}, {"name": "interactive"}], "default_class": "batch", ...}); throws
// std::invalid_argument naming the key and what it must be. where: the change's origin.
OverloadPolicy changed_overload_policy(OverloadPolicy policy, const nlohmann::json& change, const std::string& where);

// One engine's fullness: sequences in flight over its capacity.
inline double engine_load(uint32_t in_flight, uint32_t capacity) { return capacity == 0 ? 0.0 : double(in_flight) / double(capacity); }

// The policy in force and what it did. Counts tokenhost_overload_shed_total{model, class} and
// tokenhost_overload_degraded_total{model, class, to}. Thread-safe: the router reads the policy per
// request (a shared pointer, not a copy), the admin API changes it.
class OverloadGuard {
 public:
  OverloadGuard(OverloadPolicy policy, metrics::Registry* metrics);
  std::shared_ptr<const OverloadPolicy> policy() const;
  void set_policy(OverloadPolicy policy);
  // A request of `cls` for public model `model` was refused, or sent to model `to` instead.
  void shed(const std::string& model, const std::string& cls);
  void degraded(const std::string& model, const std::string& cls, const std::string& to);
  // GET /admin/guards' "overload": the policy and the counts so far.
  nlohmann::json json() const;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const OverloadPolicy> policy_;
  std::map<std::pair<std::string, std::string>, uint64_t> shed_, degraded_;  // by (model, class)
  metrics::Family* shed_family_ = nullptr;
  metrics::Family* degraded_family_ = nullptr;
};

}  // namespace tokenhost::routing
