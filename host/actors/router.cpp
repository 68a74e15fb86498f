#include "actors/router.hpp"

#include "actors/plugin_json.hpp"
#include "actors/swap_latency.hpp"
#include "api/api_error.hpp"

#include <algorithm>
#include <functional>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <variant>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace tokenhost {
namespace {

// An engine the router forwards to. Requests in flight hold their entry, so an engine removed or
// replaced while they run is still counted until they are answered.
struct RoutedEntry {
  RoutedEngine engine;
  uint32_t in_flight = 0;
};

struct RouterState {
  std::shared_ptr<PluginInstance> router;
  std::vector<std::shared_ptr<RoutedEntry>> engines;  // those taking new requests, in name order
  std::shared_ptr<experiments::ExperimentTable> experiments;
  std::function<std::string(const std::string&, const std::vector<int32_t>&)> detokenize;
  uint64_t routed = 0;
  uint64_t in_flight = 0;  // over every entry, removed ones included
  // Each request in flight, by sequence id: the engine that holds it (a cancel goes there alone), and
  // its promise, answered here if that engine stops before answering.
  struct Held {
    std::shared_ptr<RoutedEntry> entry;
    caf::typed_response_promise<GenerateResult> rp;
    std::optional<experiments::Routing> routing;
  };
  std::unordered_map<uint64_t, Held> holders;
  // Cancels that came before their request (the gateway's cancel and its start travel separately),
  // oldest first; bounded, since a cancel may also come after the answer.
  std::deque<uint64_t> early_cancels;
  static constexpr size_t kMaxEarlyCancels = 1024;
  bool draining = false;
  SwapLatency swaps;  // the router has no steps: its swap is done once the new plugin is in place
  static inline const char* name = "tokenhost.router";
};

using self_ptr = router_actor::stateful_pointer<RouterState>;

// While draining, the router stays until every request it forwarded has its answer delivered.
void quit_when_idle(self_ptr self) {
  if (self->state.draining && self->state.in_flight == 0) self->quit();
}

std::shared_ptr<RoutedEntry>* find_engine(RouterState& s, const std::string& name) {
  for (auto& e : s.engines)
    if (e->engine.name == name) return &e;
  return nullptr;
}

// The engine stops taking requests from here on; everything already sent to it (the router's
// messages to it arrive in order) runs to the end, then it stops with its worker.
void retire(self_ptr self, const RoutedEntry& e) { self->send(e.engine.actor, retire_atom::value); }

// The prompt's leading tokens engine e likely holds in its prefix cache (th_route_request.cached_tokens):
// whole blocks its summary holds, short of the last token. keys: the prompt's block keys by block size,
// made once per request.
uint32_t cached_tokens(const RoutedEntry& e, const GenerateRequest& req, uint64_t ns, std::map<uint32_t, std::vector<uint64_t>>& keys) {
  const PrefixSummary* summary = e.engine.prefix_summary.get();
  if (summary == nullptr || req.prompt.size() < 2) return 0;
  const uint32_t block = summary->block_size();
  auto it = keys.find(block);
  if (it == keys.end()) {
    it = keys.emplace(block, std::vector<uint64_t>{}).first;
    extend_prefix_block_keys(ns, req.prompt, uint32_t(req.prompt.size() - 1), block, it->second);
  }
  return uint32_t(summary->leading_matches(it->second)) * block;
}

// Runs the router plugin; returns the engine or an error message.
std::variant<std::shared_ptr<RoutedEntry>, std::string> pick(RouterState& s, const GenerateRequest& req) {
  std::vector<th_route_candidate> candidates;
  std::vector<uint32_t> cached;
  std::vector<size_t> engine_of;  // candidate index -> engine index
  const uint64_t ns = cache_namespace(req.api_key, req.cache_salt);
  std::map<uint32_t, std::vector<uint64_t>> keys;
  for (size_t i = 0; i < s.engines.size(); ++i) {
    const auto& e = *s.engines[i];
    if (!req.model.empty() && e.engine.model != req.model) continue;
    candidates.push_back({e.engine.name.c_str(), e.engine.model.c_str(), e.in_flight, 0, std::min(1.0, e.in_flight / 64.0), 1.0, 1.0, 1});
    cached.push_back(cached_tokens(e, req, ns, keys));
    engine_of.push_back(i);
  }
  if (candidates.empty())
    return s.engines.empty() ? std::string("no engine is serving") : "no engine serves model '" + req.model + "'";
  th_route_request rr{};
  rr.struct_size = sizeof rr;
  rr.request_id = req.id;
  rr.model = req.model.c_str();
  rr.prompt = "";
  rr.tokens = req.prompt.data();
  rr.n_tokens = uint32_t(req.prompt.size());
  rr.session_key = req.session_key.c_str();
  rr.candidates = candidates.data();
  rr.n_candidates = uint32_t(candidates.size());
  rr.cached_tokens = cached.data();
  std::vector<uint32_t> cascade(candidates.size());
  th_route_decision d{};
  d.struct_size = sizeof d;
  d.cascade = cascade.data();
  th_error err;
  auto& r = *s.router;
  th_status st;
  try {
    st = r.call(&th_router_vtable::route, "route", r.handle(), &rr, &d, &err);
  } catch (const PluginFault& e) {
    return std::string(e.what());  // this request's error; the router serves the next one
  }
  if (st != TH_OK) return r.id() + " route() failed with " + status_name(st) + ": " + err.text();
  size_t target = d.target;
  if (d.action == TH_ROUTE_CASCADE) {
    if (d.n_cascade == 0 || d.n_cascade > candidates.size()) return r.id() + " returned an empty or oversized cascade";
    target = cascade[0];  // escalation along the cascade needs a quality signal the runtime does not give yet
  } else if (d.action != TH_ROUTE_TARGET) {
    return r.id() + " returned action " + std::to_string(d.action) + ", which this host does not serve yet";
  }
  if (target >= candidates.size()) return r.id() + " chose candidate " + std::to_string(target) + " of " + std::to_string(candidates.size());
  return s.engines[engine_of[target]];
}

// --- A/B experiments: the split before the router plugin, and each request's outcome after it. ---

// The arm's engine for a request whose model has a running experiment; monostate when none runs (the
// router plugin picks), or why the request is refused.
using ExperimentPick = std::variant<std::monostate, std::pair<std::shared_ptr<RoutedEntry>, experiments::Routing>, std::string>;

ExperimentPick pick_by_experiment(RouterState& s, const GenerateRequest& req) {
  if (!s.experiments) return std::monostate{};
  experiments::RequestKeys keys{req.model, req.session_key, req.user, req.api_key, req.arm, req.request_class};
  auto routed = s.experiments->route(keys);
  if (auto* why = std::get_if<std::string>(&routed)) return *why;
  auto* routing = std::get_if<experiments::Routing>(&routed);
  if (routing == nullptr) return std::monostate{};
  auto* entry = find_engine(s, routing->engine);
  if (entry == nullptr) return "engine '" + routing->engine + "' of the experiment's arm is not taking requests";
  return std::make_pair(*entry, std::move(*routing));
}

void record_experiment_outcome(RouterState& s, const std::optional<experiments::Routing>& routing, const GenerateResult& r) {
  if (!s.experiments || !routing) return;
  experiments::Outcome o;
  o.failed = r.finish_reason == "error";
  o.completed = r.finish_reason == "length" || r.finish_reason == "stop";
  o.tokens_out = uint32_t(r.tokens.size());
  o.ttft_s = r.ttft_s;
  o.itl_s = r.itl_s;
  o.e2e_s = r.e2e_s;
  s.experiments->record(*routing, o);
}

// A cancel for sequence id came before the sequence: taken (true) once.
bool take_early_cancel(RouterState& s, uint64_t id) {
  auto it = std::find(s.early_cancels.begin(), s.early_cancels.end(), id);
  if (it == s.early_cancels.end()) return false;
  s.early_cancels.erase(it);
  return true;
}

// Picks the engine for req and forwards it; its answer goes to rp. A request the engine hands back
// unstarted (it retired first) is routed again, to the engine that took its place.
void dispatch(self_ptr self, GenerateRequest req, caf::typed_response_promise<GenerateResult> rp) {
  auto& s = self->state;
  if (s.draining) {
    rp.deliver(GenerateResult::failed("", "the server is shutting down"));
    return;
  }
  std::shared_ptr<RoutedEntry> entry;
  std::optional<experiments::Routing> routing;
  auto arm = pick_by_experiment(s, req);
  if (auto* e = std::get_if<std::string>(&arm)) {
    rp.deliver(GenerateResult::failed("", *e));
    return;
  }
  if (auto* chosen = std::get_if<1>(&arm)) {
    entry = chosen->first;
    routing = std::move(chosen->second);
  } else {
    auto choice = pick(s, req);
    if (auto* e = std::get_if<std::string>(&choice)) {
      rp.deliver(GenerateResult::failed("", *e));
      return;
    }
    entry = std::get<std::shared_ptr<RoutedEntry>>(choice);
  }
  ++entry->in_flight;
  ++s.in_flight;
  ++s.routed;
  auto started = std::chrono::steady_clock::now();
  uint64_t id = req.id;
  s.holders[id] = RouterState::Held{entry, rp, routing};
  const bool cancelled_early = take_early_cancel(s, id);
  uint32_t tokens_in = uint32_t(req.prompt.size());
  GenerateRequest again = req;  // to route it again if the engine hands it back
  self->request(entry->engine.actor, caf::infinite, generate_atom::value, std::move(req))
      .then(
          [self, rp, entry, started, id, tokens_in, routing, again = std::move(again)](GenerateResult& r) mutable {
            auto& s = self->state;
            if (!s.holders.erase(id)) return;  // already answered: its engine stopped (engine_down)
            --entry->in_flight;
            --s.in_flight;
            if (r.finish_reason == GenerateResult::kRerouted) {
              dispatch(self, std::move(again), rp);
              return;
            }
            record_experiment_outcome(s, routing, r);
            auto& plugin = *s.router;
            if (plugin.fn(&th_router_vtable::feedback)) {
              double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
              const std::string text = s.detokenize ? s.detokenize(entry->engine.model, r.tokens) : std::string();
              th_route_feedback f{sizeof f, id, entry->engine.name.c_str(), r.finish_reason != "error",
                                  r.ttft_s.value_or(0.0), total, tokens_in, uint32_t(r.tokens.size()),
                                  s.detokenize ? text.c_str() : nullptr, text.size()};
              try {
                plugin.call(&th_router_vtable::feedback, "feedback", plugin.handle(), &f);
              } catch (const PluginFault&) {
                // Logged; the request itself finished: its answer goes out as it is.
              }
            }
            rp.deliver(std::move(r));
            quit_when_idle(self);
          },
          [self, rp, entry, routing, id](caf::error& e) mutable {
            if (!self->state.holders.erase(id)) return;  // already answered: its engine stopped
            --entry->in_flight;
            --self->state.in_flight;
            auto r = GenerateResult::failed(entry->engine.name, "engine failed: " + self->system().render(e));
            record_experiment_outcome(self->state, routing, r);
            rp.deliver(std::move(r));
            quit_when_idle(self);
          });
  if (cancelled_early) self->send(entry->engine.actor, cancel_atom::value, id);
}

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
  std::vector<uint64_t> ids;
  for (const auto& [id, held] : s.holders)
    if (gone(*held.entry)) ids.push_back(id);
  for (uint64_t id : ids) {
    RouterState::Held held = std::move(s.holders.at(id));
    s.holders.erase(id);
    --held.entry->in_flight;
    --s.in_flight;
    auto r = GenerateResult::failed(held.entry->engine.name,
                                    "engine " + held.entry->engine.name + " stopped (" + reason + ") with the request in flight");
    record_experiment_outcome(s, held.routing, r);
    held.rp.deliver(std::move(r));
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
  for (auto& e : init.engines) {
    self->monitor(e.actor);
    self->state.engines.push_back(std::make_shared<RoutedEntry>(RoutedEntry{std::move(e), 0}));
  }
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
        s.engines.insert(at, std::make_shared<RoutedEntry>(RoutedEntry{std::move(engine), 0}));
        if (s.experiments) s.experiments->engine_up(name);  // a rebuilt engine closes its arms' gaps
        return {true, "engine " + name + " takes requests"};
      },
      [=](engine_replace_atom, RoutedEngine engine) -> SwapResult {
        auto* slot = find_engine(self->state, engine.name);
        if (!slot) return {false, "the router has no engine '" + engine.name + "'"};
        std::shared_ptr<RoutedEntry> old = *slot;
        self->monitor(engine.actor);
        *slot = std::make_shared<RoutedEntry>(RoutedEntry{std::move(engine), 0});
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
        for (const auto& e : s.engines) engines.push_back({{"name", e->engine.name}, {"in_flight", e->in_flight}});
        nlohmann::json j = {{slot_of(TH_KIND_ROUTER).name(), plugin_json(s.router)},
                            {"routed", s.routed},
                            {"last_swap", s.swaps.last()},
                            {"engines", engines}};
        return {api::dump_json(j)};
      },
      [=](cancel_atom, uint64_t id) {
        auto& s = self->state;
        if (auto it = s.holders.find(id); it != s.holders.end()) {
          self->send(it->second.entry->engine.actor, cancel_atom::value, id);
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
  };
}

}  // namespace

router_actor spawn_router(caf::actor_system& sys, RouterInit init) { return sys.spawn(router, std::move(init)); }

}  // namespace tokenhost
