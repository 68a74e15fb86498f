// The router's guards between the engines that serve a request and its router plugin
// (router_state.hpp): circuit breakers leave failing engines out, the overload policy sheds or
// degrades a request whose models are full for its class.
#include <algorithm>
#include <cmath>
#include <map>

#include "actors/router_state.hpp"

namespace tokenhost {
namespace {

using Clock = std::chrono::steady_clock;

std::string model_words(const GenerateRequest& req) { return req.model.empty() ? std::string("any model") : "model '" + req.model + "'"; }

// Every eligible engine's breaker is open: the refusal, with when the first turns half-open.
RouteRefusal all_open(const RouterState& s, const RouteJob& job, const std::vector<Eligible>& eligible, Clock::time_point now) {
  Clock::time_point first = Clock::time_point::max();
  std::string engines;
  for (const Eligible& c : eligible) {
    const RoutedEntry& e = *s.engines[c.engine];
    const Clock::time_point at = e.breaker->reopens_at();
    if (at > now) first = std::min(first, at);
    engines += std::string(engines.empty() ? "" : ", ") + e.engine.name;
  }
  const double wait = first == Clock::time_point::max() ? 1.0 : std::chrono::duration<double>(first - now).count();
  RouteRefusal r;
  r.status = 503;
  r.retry_after_s = uint32_t(std::max(1.0, std::ceil(wait)));
  r.code = "breaker_open";
  r.message = "every engine of " + model_words(job.req) + " has its circuit breaker open after failing requests (" + engines +
              "); retry in " + std::to_string(r.retry_after_s) + " s";
  return r;
}

}  // namespace

std::optional<RouteRefusal> guard_candidates(RouterState& s, const RouteJob& job, std::vector<Eligible>& eligible,
                                             std::string& degraded_class) {
  if (s.breakers && s.breakers->any_not_closed()) {
    const auto now = Clock::now();
    auto closed_end = std::stable_partition(eligible.begin(), eligible.end(), [&](const Eligible& c) {
      const auto& b = s.engines[c.engine]->breaker;
      return !b || b->routable(now);
    });
    if (closed_end == eligible.begin()) return all_open(s, job, eligible, now);
    eligible.erase(closed_end, eligible.end());
  }
  if (!s.overload) return std::nullopt;
  const std::shared_ptr<const routing::OverloadPolicy> policy = s.overload->policy();
  if (!policy->enabled || policy->classes.empty()) return std::nullopt;
  const size_t cls = policy->class_of(job.req.request_class);
  const double shed_at = policy->shed_at(cls);
  if (shed_at <= 0) return std::nullopt;  // the highest class is never shed
  // Each model among the eligible: whether every engine of it is full for the class, and its cost.
  struct ModelLoad {
    bool full = true;
    double cost = 1.0;
  };
  std::map<std::string, ModelLoad> models;
  auto capacity_of = [&](const RoutedEntry& e) { return policy->engine_sequences > 0 ? policy->engine_sequences : e.engine.capacity; };
  for (const Eligible& c : eligible) {
    const RoutedEntry& e = *s.engines[c.engine];
    ModelLoad& m = models[e.engine.model];
    m.cost = c.cost;
    m.full = m.full && routing::engine_load(e.in_flight, capacity_of(e)) >= shed_at;
  }
  double full_cost = -1;  // the cheapest full model's cost; -1: none is full
  for (const auto& [name, m] : models)
    if (m.full) full_cost = full_cost < 0 ? m.cost : std::min(full_cost, m.cost);
  if (full_cost < 0) return std::nullopt;
  const std::string& class_name = policy->classes[cls].name;
  if (policy->action == "cheaper") {
    auto keep_end = std::stable_partition(eligible.begin(), eligible.end(), [&](const Eligible& c) {
      const ModelLoad& m = models.at(s.engines[c.engine]->engine.model);
      return !m.full && m.cost < full_cost;
    });
    if (keep_end != eligible.begin()) {
      eligible.erase(keep_end, eligible.end());
      degraded_class = class_name;
      return std::nullopt;
    }
  } else if (std::any_of(models.begin(), models.end(), [](const auto& m) { return !m.second.full; })) {
    return std::nullopt;  // shed only when every model the request may go to is full
  }
  // The refusal's words: "model: name in_flight/capacity, ...; model: ..." for each full model.
  std::string full_words;
  for (const auto& [name, m] : models) {
    if (!m.full) continue;
    full_words += std::string(full_words.empty() ? "" : "; ") + name + ":";
    const char* sep = " ";
    for (const Eligible& c : eligible)
      if (const RoutedEntry& e = *s.engines[c.engine]; e.engine.model == name) {
        full_words += sep + e.engine.name + " " + std::to_string(e.in_flight) + "/" + std::to_string(capacity_of(e));
        sep = ", ";
      }
  }
  s.overload->shed(job.req.model.empty() ? "-" : job.req.model, class_name);
  RouteRefusal r;
  r.status = 503;
  r.retry_after_s = policy->retry_after_s;
  r.code = "overloaded";
  r.message = model_words(job.req) + " is at capacity for requests of class '" + class_name + "' (shed at " +
              std::to_string(int(std::lround(shed_at * 100))) + "% of each engine's sequences; in flight/capacity: " + full_words +
              "): higher classes are still served; retry in " + std::to_string(r.retry_after_s) + " s";
  return r;
}

void record_outcome(RoutedEntry& entry, const GenerateResult& r) {
  if (!entry.breaker) return;
  const bool cancelled = r.finish_reason == "cancelled" || r.finish_reason == GenerateResult::kRerouted;
  // A node's admission refusing it is load, not a failure of the engine.
  const bool failed = r.finish_reason == "error" && r.refused_status == 0;
  entry.breaker->record(failed, r.ttft_s, cancelled);
}

}  // namespace tokenhost
