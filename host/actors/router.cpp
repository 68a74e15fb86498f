#include "actors/router.hpp"

#include "actors/plugin_json.hpp"

#include <algorithm>
#include <chrono>
#include <variant>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace tokenhost {
namespace {

struct RouterState {
  RouterInit init;
  std::vector<uint32_t> in_flight;  // per engine
  uint64_t routed = 0;
  bool draining = false;
  static inline const char* name = "tokenhost.router";
};

using self_ptr = router_actor::stateful_pointer<RouterState>;

// While draining, the router stays until every request it forwarded has its answer delivered.
void quit_when_idle(self_ptr self) {
  const auto& n = self->state.in_flight;
  if (self->state.draining && std::all_of(n.begin(), n.end(), [](uint32_t x) { return x == 0; })) self->quit();
}

// Runs the router plugin; returns the engine index or an error message.
std::variant<size_t, std::string> pick(RouterState& s, const GenerateRequest& req) {
  std::vector<th_route_candidate> candidates;
  std::vector<size_t> engine_of;  // candidate index -> engine index
  for (size_t i = 0; i < s.init.engines.size(); ++i) {
    const auto& e = s.init.engines[i];
    if (!req.model.empty() && e.model != req.model) continue;
    candidates.push_back({e.name.c_str(), e.model.c_str(), s.in_flight[i], 0, std::min(1.0, s.in_flight[i] / 64.0), 1.0, 1.0, 1});
    engine_of.push_back(i);
  }
  if (candidates.empty()) return "no engine serves model '" + req.model + "'";
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
  std::vector<uint32_t> cascade(candidates.size());
  th_route_decision d{};
  d.struct_size = sizeof d;
  d.cascade = cascade.data();
  th_error err;
  auto& r = *s.init.router;
  th_status st = r.vtable<th_router_vtable>().route(r.handle(), &rr, &d, &err);
  if (st != TH_OK) return r.id() + " route() failed with " + status_name(st) + ": " + err.text();
  size_t target = d.target;
  if (d.action == TH_ROUTE_CASCADE) {
    if (d.n_cascade == 0 || d.n_cascade > candidates.size()) return r.id() + " returned an empty or oversized cascade";
    target = cascade[0];  // escalation along the cascade needs a quality signal the runtime does not give yet
  } else if (d.action != TH_ROUTE_TARGET) {
    return r.id() + " returned action " + std::to_string(d.action) + ", which this host does not serve yet";
  }
  if (target >= candidates.size()) return r.id() + " chose candidate " + std::to_string(target) + " of " + std::to_string(candidates.size());
  return engine_of[target];
}

router_actor::behavior_type router(self_ptr self, RouterInit init) {
  self->state.init = std::move(init);
  self->state.in_flight.assign(self->state.init.engines.size(), 0);
  return {
      [=](generate_atom, GenerateRequest req) -> caf::result<GenerateResult> {
        auto& s = self->state;
        if (s.draining) return GenerateResult::failed("", "the server is shutting down");
        auto choice = pick(s, req);
        if (auto* e = std::get_if<std::string>(&choice)) return GenerateResult::failed("", *e);
        size_t index = std::get<size_t>(choice);
        ++s.in_flight[index];
        ++s.routed;
        auto rp = self->make_response_promise<GenerateResult>();
        auto started = std::chrono::steady_clock::now();
        uint64_t id = req.id;
        uint32_t tokens_in = uint32_t(req.prompt.size());
        self->request(s.init.engines[index].actor, caf::infinite, generate_atom::value, std::move(req))
            .then(
                [self, rp, index, started, id, tokens_in](GenerateResult& r) mutable {
                  auto& s = self->state;
                  --s.in_flight[index];
                  auto& plugin = *s.init.router;
                  if (auto fb = plugin.vtable<th_router_vtable>().feedback) {
                    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                    th_route_feedback f{sizeof f, id, s.init.engines[index].name.c_str(), r.finish_reason != "error",
                                        0.0, total, tokens_in, uint32_t(r.tokens.size()), nullptr, 0};
                    fb(plugin.handle(), &f);
                  }
                  rp.deliver(std::move(r));
                  quit_when_idle(self);
                },
                [self, rp, index](caf::error& e) mutable {
                  --self->state.in_flight[index];
                  rp.deliver(GenerateResult::failed(self->state.init.engines[index].name,
                                            "engine failed: " + self->system().render(e)));
                  quit_when_idle(self);
                });
        return rp;
      },
      [=](swap_atom, SlotSwap swap) -> SwapResult {
        auto& s = self->state;
        if (swap.slot != "router") return {false, "the router has no slot '" + swap.slot + "'"};
        std::string old = s.init.router->id() + " " + s.init.router->version();
        s.init.router = std::move(swap.instance);
        spdlog::info("router swapped {} -> {} {}", old, s.init.router->id(), s.init.router->version());
        return {true, "router: " + old + " -> " + s.init.router->id() + " " + s.init.router->version()};
      },
      [=](status_atom, const std::string&) -> StatusJson {
        auto& s = self->state;
        nlohmann::json engines = nlohmann::json::array();
        for (size_t i = 0; i < s.init.engines.size(); ++i)
          engines.push_back({{"name", s.init.engines[i].name}, {"in_flight", s.in_flight[i]}});
        nlohmann::json j = {{"router", plugin_json(s.init.router)},
                            {"routed", s.routed},
                            {"engines", engines}};
        return {j.dump()};
      },
      [=](drain_atom) {
        self->state.draining = true;
        for (auto& e : self->state.init.engines) self->send(e.actor, drain_atom::value);
        quit_when_idle(self);
      },
  };
}

}  // namespace

router_actor spawn_router(caf::actor_system& sys, RouterInit init) { return sys.spawn(router, std::move(init)); }

}  // namespace tokenhost
