#include "cluster/engine_proxy.hpp"

#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/token_stream.hpp"
#include "cluster/wire.hpp"

namespace tokenhost::cluster {
namespace {

struct InFlight {
  std::shared_ptr<TokenStream> stream;  // the client's; NULL for callers that do not stream
  bool live = true;                     // GenerateRequest::live: push tokens as they come, else hold them
  uint64_t seen = 0;                    // tokens received
  std::vector<SampledToken> held;       // not live: the tokens, pushed at the sequence's end
  bool cancel_sent = false;
  caf::typed_response_promise<GenerateResult> rp;
};

struct ProxyState {
  EngineProxyInit init;
  std::unordered_map<uint64_t, InFlight> in_flight;  // by sequence id
  uint64_t sent = 0, answered = 0;
  bool ending = false;  // retired or drained: it quits once nothing is in flight
  static inline const char* name = "tokenhost.cluster.engine_proxy";
};

using proxy_ptr = engine_proxy_actor::stateful_pointer<ProxyState>;

void quit_when_idle(proxy_ptr self) {
  if (self->state.ending && self->state.in_flight.empty()) self->quit();
}

void cancel_remote(proxy_ptr self, uint64_t seq, InFlight& f) {
  if (f.cancel_sent) return;
  f.cancel_sent = true;
  self->send(self->state.init.node, cancel_atom::value, seq);
}

engine_proxy_actor::behavior_type proxy(proxy_ptr self, EngineProxyInit init) {
  self->state.init = std::move(init);
  return {
      [=](generate_atom, GenerateRequest req) -> caf::result<GenerateResult> {
        auto& s = self->state;
        if (s.ending) {
          GenerateResult r;
          r.finish_reason = GenerateResult::kRerouted;  // retired: the router routes it again
          r.engine = s.init.name;
          return r;
        }
        const uint64_t seq = req.id;
        auto rp = self->make_response_promise<GenerateResult>();
        s.in_flight[seq] = InFlight{req.stream, req.live, 0, {}, false, rp};
        RemoteGenerate g{s.init.remote_name, std::move(req)};
        g.request.stream = nullptr;
        ++s.sent;
        self->request(s.init.node, caf::infinite, generate_atom::value, encode(g))
            .then(
                [=](const std::string& bytes) mutable {
                  auto& st = self->state;
                  if (!st.in_flight.count(seq)) return;  // answered when its node was lost
                  GenerateResult r;
                  try {
                    r = decode_result(bytes);
                  } catch (const WireError& e) {
                    spdlog::error("cluster: node {} answered sequence {} with a message that does not decode: {}", st.init.node_name, seq, e.what());
                    r = GenerateResult::failed(st.init.name, std::string("node " + st.init.node_name + " sent a malformed answer: ") + e.what());
                  }
                  r.engine = st.init.name;
                  InFlight& f = st.in_flight.at(seq);
                  if (f.stream)
                    for (const auto& t : f.held) f.stream->push(t);
                  st.in_flight.erase(seq);
                  ++st.answered;
                  rp.deliver(std::move(r));
                  quit_when_idle(self);
                },
                [=](caf::error& e) mutable {
                  auto& st = self->state;
                  if (!st.in_flight.count(seq)) return;
                  st.in_flight.erase(seq);
                  rp.deliver(GenerateResult::failed(st.init.name, "node " + st.init.node_name + " did not answer: " + self->system().render(e)));
                  quit_when_idle(self);
                });
        return rp;
      },
      [=](tokens_atom, const std::string& bytes) {
        auto& s = self->state;
        TokenBatch b;
        try {
          b = decode_tokens(bytes);
        } catch (const WireError& e) {
          spdlog::error("cluster: node {} sent tokens that do not decode: {}", s.init.node_name, e.what());
          return;
        }
        auto it = s.in_flight.find(b.seq);
        if (it == s.in_flight.end()) return;  // answered or cancelled meanwhile
        InFlight& f = it->second;
        if (b.first != f.seen) {
          spdlog::error("cluster: node {} sent tokens {}.. of sequence {}, expected {}..: the sequence is cancelled", s.init.node_name,
                        b.first, b.seq, f.seen);
          cancel_remote(self, b.seq, f);
          return;
        }
        f.seen += b.tokens.size();
        if (!f.live)
          f.held.insert(f.held.end(), b.tokens.begin(), b.tokens.end());
        else if (f.stream)
          for (const auto& t : b.tokens) f.stream->push(t);
        if (f.stream && f.stream->cancelled()) cancel_remote(self, b.seq, f);
      },
      [=](swap_atom, const SlotSwap&) -> SwapResult {
        return {false, "engine " + self->state.init.name + " runs on node " + self->state.init.node_name +
                           ": its slots change through the head's admin API"};
      },
      [=](status_atom, const std::string&) -> StatusJson {
        const auto& s = self->state;
        nlohmann::json j{{"node", s.init.node_name}, {"remote_name", s.init.remote_name}, {"in_flight", s.in_flight.size()},
                         {"sent", s.sent}, {"answered", s.answered}};
        return {j.dump()};
      },
      [=](cancel_atom, uint64_t seq) {
        auto it = self->state.in_flight.find(seq);
        if (it != self->state.in_flight.end()) cancel_remote(self, seq, it->second);
      },
      [=](lost_atom, const std::string& why) {
        // Its node is gone. A sequence no client has seen tokens of (none came, or they were held
        // back) is handed back to the router, which routes it again (to another engine: this one
        // leaves the router now; the held tokens tell it this was a run, which it repeats once); one
        // whose tokens went out cannot be taken back and ends with the reason.
        auto& s = self->state;
        size_t rerouted = 0, failed = 0;
        for (auto& [seq, f] : s.in_flight) {
          GenerateResult r;
          if (f.seen == 0 || !f.live) {
            r.finish_reason = GenerateResult::kRerouted;
            r.engine = s.init.name;
            for (const auto& t : f.held) r.tokens.push_back(t.token);
            ++rerouted;
          } else {
            r = GenerateResult::failed(s.init.name, "engine " + s.init.name + " lost after " + std::to_string(f.seen) + " token(s): " + why);
            ++failed;
          }
          f.rp.deliver(std::move(r));
        }
        s.in_flight.clear();
        if (rerouted + failed > 0)
          spdlog::warn("cluster: engine {} lost ({}): {} sequence(s) routed again, {} whose tokens had gone out ended with an error", s.init.name,
                       why, rerouted, failed);
        self->quit();
      },
      [=](drain_atom) {
        self->state.ending = true;
        quit_when_idle(self);
      },
      [=](retire_atom) {
        self->state.ending = true;
        quit_when_idle(self);
      },
      [=](tick_atom) {},
  };
}

}  // namespace

engine_proxy_actor spawn_engine_proxy(caf::actor_system& system, EngineProxyInit init) {
  return system.spawn(proxy, std::move(init));
}

}  // namespace tokenhost::cluster
