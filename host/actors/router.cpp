#include "actors/router.hpp"

#include "actors/plugin_json.hpp"
#include "actors/router_state.hpp"
#include "api/api_error.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace tokenhost {
namespace {

// The engine stops taking requests from here on; everything already sent to it (the router's
// messages to it arrive in order) runs to the end, then it stops with its worker.
void retire(self_ptr self, const RoutedEntry& e) { self->send(e.engine.actor, retire_atom::value); }

// An engine that can serve no more: the router routes nothing more to it and answers the requests it
// still held, in the words of its vitals (the plugin fault it noted, the hang) or else `reason`'s: their
// engine cannot. Returns how many it held.
size_t drop_engine(self_ptr self, const std::function<bool(const RoutedEntry&)>& gone, std::string reason) {
  auto& s = self->state;
  for (auto it = s.engines.begin(); it != s.engines.end();)
    if (gone(**it)) {
      if (const auto& v = (*it)->engine.vitals) reason = v->account(reason);
      spdlog::error("router: engine {} stopped ({}): it takes no more requests", (*it)->engine.name, reason);
      if (s.experiments) s.experiments->engine_down((*it)->engine.name, reason);
      it = s.engines.erase(it);
    } else {
      ++it;
    }
  index_engines(s);
  // Their sequences end here, each through its plan (a cascade's stage moves on to the next one).
  std::vector<uint64_t> ids;
  for (const auto& [seq, held] : s.holders)
    if (gone(*held.entry)) ids.push_back(seq);
  for (uint64_t seq : ids) {
    auto it = s.holders.find(seq);
    if (it == s.holders.end()) continue;
    const std::string name = it->second.entry->engine.name;
    auto r = GenerateResult::failed(name, "engine " + name + " stopped (" + reason + ") with the request in flight");
    settle(self, seq, r);
  }
  if (!ids.empty()) spdlog::error("router: {} request(s) in flight on the stopped engine end with an error", ids.size());
  quit_when_idle(self);
  return ids.size();
}

// An engine actor stopped. Whatever the reason (a fault past every boundary, a kill, its worker gone,
// or retired and done), the router routes nothing more to it and answers the requests it still held.
// A retired engine holds none by then.
void engine_down(self_ptr self, const caf::down_msg& down) {
  drop_engine(self, [&](const RoutedEntry& e) { return e.engine.actor.address() == down.source; },
              self->system().render(down.reason));
}

router_actor::behavior_type router(self_ptr self, RouterInit init) {
  self->state.router = std::move(init.router);
  self->state.swaps.bind(init.metrics, slot_of(TH_KIND_ROUTER).name());
  self->state.experiments = std::move(init.experiments);
  self->state.detokenize = std::move(init.detokenize);
  self->state.groups = std::move(init.groups);
  self->state.vocab_sizes = std::move(init.vocab_sizes);
  self->state.breakers = std::move(init.breakers);
  self->state.overload = std::move(init.overload);
  if (init.metrics != nullptr) {
    self->state.answers = &init.metrics->family(metrics::Type::counter, "tokenhost_router_answers_total",
                                                "Requests answered, by public model and how: engine (one engine), cascade_first (a "
                                                "cascade's first stage), escalated (a later stage), ensemble, cached (a router's cache), "
                                                "failed (the router plugin failed it)",
                                                {"model", "how"});
    self->state.costs = &init.metrics->family(metrics::Type::counter, "tokenhost_router_cost_total",
                                              "Cost accounted, by public model: the sum over the engines that generated of their "
                                              "declared cost per million tokens x (prompt + generated tokens) / 1e6",
                                              {"model"});
    self->state.decisions = &init.metrics->family(metrics::Type::histogram, "tokenhost_router_decision_seconds",
                                                  "Time the router takes to choose a request's engines: the A/B split, the guards, the "
                                                  "router plugin and the checks of its answer (not the engines' work)",
                                                  {}, {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 1e-2});
  }
  for (auto& e : init.engines) {
    self->monitor(e.actor);
    self->state.engines.push_back(make_entry(self->state, std::move(e)));
  }
  index_engines(self->state);
  self->set_down_handler([self](caf::down_msg& down) { engine_down(self, down); });
  return {
      [=](generate_atom, GenerateRequest req) -> caf::result<GenerateResult> {
        auto rp = self->make_response_promise<GenerateResult>();
        dispatch(self, std::move(req), rp);
        return rp;
      },
      [=](engine_add_atom, RoutedEngine engine) -> SwapResult {
        auto& s = self->state;
        if (find_engine(s, engine.name)) return {false, "the router already has an engine '" + engine.name + "'"};
        std::string name = engine.name;
        self->monitor(engine.actor);
        auto at = std::find_if(s.engines.begin(), s.engines.end(), [&](const auto& e) { return e->engine.name > name; });
        s.engines.insert(at, make_entry(s, std::move(engine)));
        index_engines(s);
        if (s.experiments) s.experiments->engine_up(name);  // a rebuilt engine closes its arms' gaps
        return {true, "engine " + name + " takes requests"};
      },
      [=](engine_replace_atom, RoutedEngine engine) -> SwapResult {
        auto* slot = find_engine(self->state, engine.name);
        if (!slot) return {false, "the router has no engine '" + engine.name + "'"};
        std::shared_ptr<RoutedEntry> old = *slot;
        self->monitor(engine.actor);
        *slot = make_entry(self->state, std::move(engine));
        index_engines(self->state);
        retire(self, *old);
        return {true, "new requests go to the new engine; the old one finishes its " + std::to_string(old->in_flight) + " request(s)"};
      },
      [=](engine_hung_atom, const std::string& name, const std::string& why) -> SwapResult {
        auto* entry = find_engine(self->state, name);
        if (entry == nullptr) return {false, "the router has no engine '" + name + "'"};
        const caf::actor_addr hung = (*entry)->engine.actor.address();  // not a retiring engine of its name
        const size_t held = drop_engine(self, [&](const RoutedEntry& e) { return e.engine.actor.address() == hung; }, why);
        return {true, "engine " + name + " takes no more requests; " + std::to_string(held) + " in flight ended"};
      },
      [=](engine_remove_atom, const std::string& name) -> SwapResult {
        auto& s = self->state;
        auto* slot = find_engine(s, name);
        if (!slot) return {false, "the router has no engine '" + name + "'"};
        std::shared_ptr<RoutedEntry> old = *slot;
        s.engines.erase(s.engines.begin() + (slot - s.engines.data()));
        index_engines(s);
        retire(self, *old);
        return {true, "engine " + name + " takes no new requests and finishes its " + std::to_string(old->in_flight) + " request(s)"};
      },
      [=](swap_atom, SlotSwap swap) -> SwapResult {
        auto& s = self->state;
        if (swap.slot.info().owner != SlotOwner::router) return {false, "the router has no slot '" + std::string(swap.slot.name()) + "'"};
        std::string old = s.router->id() + " " + s.router->version();
        s.router = std::move(swap.instance);
        s.swaps.applied(swap.slot.name(), swap.requested_ns);
        s.swaps.step_started();
        spdlog::info("router swapped {} -> {} {}", old, s.router->id(), s.router->version());
        return {true, "router: " + old + " -> " + s.router->id() + " " + s.router->version()};
      },
      [=](status_atom, const std::string&) -> StatusJson {
        auto& s = self->state;
        nlohmann::json engines = nlohmann::json::array();
        for (const auto& e : s.engines) {
          nlohmann::json j = {{"name", e->engine.name}, {"in_flight", e->in_flight}, {"capacity", e->engine.capacity}};
          if (e->breaker) j["breaker"] = routing::breaker_state_name(e->breaker->state());
          engines.push_back(std::move(j));
        }
        nlohmann::json j = {{slot_of(TH_KIND_ROUTER).name(), plugin_json(s.router)},
                            {"routed", s.routed},
                            {"decision_us", s.decision_times.json()},
                            {"last_swap", s.swaps.last()},
                            {"engines", engines}};
        return {api::dump_json(j)};
      },
      [=](cancel_atom, uint64_t id) {
        auto& s = self->state;
        if (auto it = s.jobs.find(id); it != s.jobs.end()) {
          cancel_job(self, *it->second);
          return;
        }
        s.early_cancels.push_back(id);
        if (s.early_cancels.size() > RouterState::kMaxEarlyCancels) s.early_cancels.pop_front();
      },
      [=](drain_atom) {
        self->state.draining = true;
        for (auto& e : self->state.engines) self->send(e->engine.actor, drain_atom::value);
        quit_when_idle(self);
      },
      [=](stage_tick_atom, uint64_t id) { stage_tick(self, id); },
  };
}

}  // namespace

void index_engines(RouterState& s) {
  s.views.clear();
  s.models.clear();
  s.views.reserve(s.engines.size());
  for (const auto& e : s.engines) {
    CandidateView v;
    v.entry = e.get();
    v.name = e->engine.name.c_str();
    v.node = e->engine.node.c_str();
    v.role = e->engine.role;
    v.rtt = e->engine.rtt_s.get();
    if (const PrefixSummary* summary = e->engine.prefix_summary.get()) {
      v.summary = summary;
      v.filter = summary->filter();
      v.block_size = summary->block_size();
    }
    auto m = std::find(s.models.begin(), s.models.end(), e->engine.model);
    v.model = uint32_t(m - s.models.begin());
    if (m == s.models.end()) s.models.push_back(e->engine.model);
    s.views.push_back(v);
  }
}

nlohmann::json DecisionTimes::json() const {
  std::vector<double> v(recent_.begin(), recent_.begin() + std::min<uint64_t>(count_, kDecisions));
  if (v.empty()) return {{"p50", nullptr}, {"p99", nullptr}, {"of", 0}};
  auto at = [&](double q) {
    auto k = v.begin() + std::ptrdiff_t(q * double(v.size() - 1));
    std::nth_element(v.begin(), k, v.end());
    return std::round(*k * 1e7) / 10.0;  // µs, to a tenth
  };
  const double p50 = at(0.5), p99 = at(0.99);
  return {{"p50", p50}, {"p99", p99}, {"of", v.size()}};
}

router_actor spawn_router(caf::actor_system& sys, RouterInit init) { return sys.spawn(router, std::move(init)); }

}  // namespace tokenhost
