#include "cluster/node_actor.hpp"

#include <atomic>
#include <map>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "actors/token_stream.hpp"

namespace tokenhost::cluster {

std::string link_context(const caf::node_id& head, const caf::node_id& worker) {
  return to_string(head) + "|" + to_string(worker);
}

namespace {

// A head that said hello and has not yet proved its name.
struct PendingHead {
  std::string name, certificate, nonce;
};

// One sequence a head sent, running on an engine here.
struct Relay {
  uint64_t head_seq = 0;        // its id at the head (the token batches and cancels name it so)
  caf::strong_actor_ptr sink;   // the head's engine proxy that sent it
  caf::node_id head;
  engine_actor engine;
  std::shared_ptr<TokenStream> stream;
  std::shared_ptr<std::atomic<bool>> relay_queued;
  size_t sent = 0;  // tokens relayed
  std::shared_ptr<void> admission;  // this node's admission ticket, given back when the relay ends
};

struct NodeState {
  NodeInit init;
  std::map<caf::node_id, PendingHead> pending;
  struct Head {
    std::string name;
    caf::actor_addr link;  // the head's link actor: its end is the head's
    link_actor link_handle;  // the same, to send the head's engines KV connectors' messages
  };
  std::map<caf::node_id, Head> heads;  // proved, by CAF node
  std::unordered_map<uint64_t, Relay> relays;  // by the id the engine knows (local_ids)
  // Sequences heads send get ids of their own here: two heads number theirs alike, and this node's
  // own gateway numbers from 1.
  uint64_t next_local = uint64_t(3) << 60;
  static inline const char* name = "tokenhost.cluster.node";
};

using node_ptr = node_actor::stateful_pointer<NodeState>;

std::string head_name(node_ptr self) {
  auto it = self->state.heads.find(self->current_sender()->node());
  return it == self->state.heads.end() ? "" : it->second.name;
}

// Sends the tokens of relay `local` that the head has not had yet.
void relay_tokens(node_ptr self, uint64_t local) {
  auto it = self->state.relays.find(local);
  if (it == self->state.relays.end()) return;
  Relay& r = it->second;
  r.relay_queued->store(false);
  TokenStream::Update u = r.stream->wait(r.sent, std::chrono::milliseconds(0));
  if (u.tokens.empty()) return;
  TokenBatch batch{r.head_seq, r.sent, std::move(u.tokens)};
  r.sent += batch.tokens.size();
  self->send(caf::actor_cast<engine_proxy_actor>(r.sink), tokens_atom::value, encode(batch));
}

// An actor of a head is gone: an engine proxy (its sequences are cancelled) or the head's link (the
// head left: every sequence it sent is cancelled, and it must prove its name again to send more).
void actor_down(node_ptr self, const caf::down_msg& down) {
  auto& s = self->state;
  const caf::node_id node = down.source.node();
  auto head = s.heads.find(node);
  const bool link = head != s.heads.end() && head->second.link == down.source;
  size_t n = 0;
  for (auto& [local, r] : s.relays)
    if (link ? r.head == node : r.sink && r.sink->address() == down.source) {
      r.stream->cancel();
      self->send(r.engine, cancel_atom::value, local);
      ++n;
    }
  if (!link) return;
  spdlog::warn("cluster: head {} left ({}): {} of its sequence(s) cancelled", head->second.name, self->system().render(down.reason), n);
  s.heads.erase(head);
  s.pending.erase(node);
}

node_actor::behavior_type node(node_ptr self, NodeInit init) {
  self->state.init = std::move(init);
  self->set_down_handler([self](caf::down_msg& down) {
    actor_down(self, down);
  });
  return {
      [=](hello_atom, const std::string& bytes) -> caf::result<std::string> {
        auto& s = self->state;
        const caf::node_id peer = self->current_sender()->node();
        Hello hello;
        try {
          hello = decode_hello(bytes);
          if (hello.role != "head") throw WireError("hello.role: a worker said hello to a worker");
        } catch (const WireError& e) {
          spdlog::error("cluster: refused a hello from {}: {}", to_string(peer), e.what());
          return caf::make_error(caf::sec::invalid_argument, e.what());
        }
        if (s.init.identity) {
          PeerCheck c = s.init.identity->verify_certificate(hello.certificate, hello.node);
          if (!c.ok()) {
            spdlog::error("cluster: refused head '{}' from {}: {}", hello.node, to_string(peer), c.error);
            return caf::make_error(caf::sec::invalid_argument, "refused: " + c.error);
          }
        }
        Welcome w;
        w.hello.node = s.init.name;
        w.hello.role = "worker";
        w.hello.nonce = make_nonce();
        if (s.init.identity) {
          w.hello.certificate = s.init.identity->certificate_pem();
          w.hello.signature = s.init.identity->sign(
              NodeIdentity::hello_message("welcome", s.init.name, hello.node, hello.nonce, link_context(peer, self->node())));
        }
        w.engines = s.init.engines(PrefixVersions{});
        s.pending[peer] = PendingHead{hello.node, hello.certificate, w.hello.nonce};
        return encode(w);
      },
      [=](prove_atom, const std::string& signature) -> std::string {
        auto& s = self->state;
        const caf::node_id peer = self->current_sender()->node();
        auto it = s.pending.find(peer);
        if (it == s.pending.end()) {
          spdlog::error("cluster: refused a proof from {}: it said no hello", to_string(peer));
          return "no hello came first";
        }
        PendingHead p = std::move(it->second);
        s.pending.erase(it);
        if (s.init.identity) {
          PeerCheck c = s.init.identity->verify_peer(
              p.certificate, NodeIdentity::hello_message("prove", p.name, s.init.name, p.nonce, link_context(peer, self->node())),
              signature, p.name);
          if (!c.ok()) {
            spdlog::error("cluster: refused head '{}' from {}: {}", p.name, to_string(peer), c.error);
            return c.error;
          }
        }
        s.heads[peer] = {p.name, self->current_sender()->address(), caf::actor_cast<link_actor>(self->current_sender())};
        self->monitor(self->current_sender());  // the head's link: when it goes, so do its sequences
        spdlog::info("cluster: head {} joined (node {})", p.name, to_string(peer));
        return "";
      },
      [=](ping_atom, uint64_t t, const std::string& held) -> caf::result<uint64_t, std::string> {
        const std::string head = head_name(self);
        if (head.empty()) return caf::make_error(caf::sec::request_receiver_down, "not a head of this node");
        PrefixVersions versions;
        try {
          versions = decode_prefix_versions(held);
        } catch (const WireError& e) {
          spdlog::error("cluster: head {} sent prefix versions that do not decode ({}): sending every summary", head, e.what());
        }
        return caf::make_result(t, encode(self->state.init.engines(versions)));
      },
      [=](slot_atom, const std::string& bytes) -> caf::result<std::string> {
        const std::string head = head_name(self);
        if (head.empty()) {
          spdlog::error("cluster: refused a slot change from node {}: not a head that proved its name", to_string(self->current_sender()->node()));
          return caf::make_error(caf::sec::request_receiver_down, "not a head of this node");
        }
        SlotChange c;
        try {
          c = decode_slot_change(bytes);
        } catch (const WireError& e) {
          spdlog::error("cluster: refused a slot change from head {}: {}", head, e.what());
          return encode(AdminReply{false, 400, std::string("the worker refused it: ") + e.what()});
        }
        spdlog::info("cluster: head {} changes slot {} of engine {} to {}", head, c.slot, c.engine, c.plugin.empty() ? "(empty)" : c.plugin);
        // The admin operation loads and checks plugins, and may build an engine: on a thread of its own.
        if (!self->state.init.change_slot) return encode(AdminReply{false, 501, "node " + self->state.init.name + " takes no slot changes"});
        auto op = self->system().spawn<caf::detached>([change = self->state.init.change_slot, c](caf::event_based_actor* op_self) -> caf::behavior {
          return {[=](slot_atom, const std::string&) -> std::string {
            op_self->quit();
            return encode(change(c));
          }};
        });
        auto rp = self->make_response_promise<std::string>();
        self->request(op, caf::infinite, slot_atom::value, bytes)
            .then([rp](std::string& reply) mutable { rp.deliver(std::move(reply)); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](generate_atom, const std::string& bytes) -> caf::result<std::string> {
        auto& s = self->state;
        const std::string head = head_name(self);
        if (head.empty()) {
          spdlog::error("cluster: refused a sequence from node {}: not a head that proved its name", to_string(self->current_sender()->node()));
          return caf::make_error(caf::sec::request_receiver_down, "not a head of this node");
        }
        RemoteGenerate g;
        try {
          g = decode_generate(bytes);
          validate(g.request.sampling);
        } catch (const std::exception& e) {
          spdlog::error("cluster: refused a sequence from head {}: {}", head, e.what());
          return encode(GenerateResult::failed(g.engine, std::string("the worker refused it: ") + e.what()));
        }
        std::optional<engine_actor> engine = s.init.find_engine(g.engine);
        if (!engine) return encode(GenerateResult::failed(g.engine, "engine " + g.engine + " does not serve on node " + s.init.name));
        std::shared_ptr<void> admission;
        if (s.init.admit) {
          NodeInit::Admitted a = s.init.admit(g.engine, g.request);
          if (!a.ticket) {
            spdlog::info("cluster: refused a sequence of head {} for engine {} ({}): {}", head, g.engine, a.status, a.why);
            GenerateResult r = GenerateResult::failed(g.engine, "node " + s.init.name + " refused it: " + a.why);
            r.refused_status = a.status;
            r.retry_after_s = a.retry_after_s;
            return encode(r);
          }
          admission = std::move(a.ticket);
        }
        const uint64_t local = s.next_local++;
        Relay r;
        r.head_seq = g.request.id;
        r.sink = self->current_sender();
        r.head = r.sink->node();
        r.engine = *engine;
        r.stream = std::make_shared<TokenStream>();
        r.relay_queued = std::make_shared<std::atomic<bool>>(false);
        r.admission = std::move(admission);
        auto signal = std::make_shared<StreamSignal>();
        signal->on_change([queued = r.relay_queued, me = caf::actor_cast<caf::actor>(self), local] {
          if (!queued->exchange(true)) caf::anon_send(me, relay_atom::value, local);
        });
        r.stream->listen(signal);
        self->monitor(r.sink);
        GenerateRequest req = std::move(g.request);
        req.id = local;
        req.stream = r.stream;
        s.relays.emplace(local, std::move(r));
        auto rp = self->make_response_promise<std::string>();
        self->request(*engine, caf::infinite, generate_atom::value, std::move(req))
            .then(
                [=](GenerateResult& result) mutable {
                  relay_tokens(self, local);  // every token before the result (one sender, in order)
                  self->state.relays.erase(local);
                  rp.deliver(encode(result));
                },
                [=](caf::error& e) mutable {
                  self->state.relays.erase(local);
                  rp.deliver(encode(GenerateResult::failed("", "the engine did not answer: " + self->system().render(e))));
                });
        return rp;
      },
      [=](cancel_atom, uint64_t head_seq) {
        const caf::node_id from = self->current_sender()->node();
        for (auto& [local, r] : self->state.relays)
          if (r.head == from && r.head_seq == head_seq) {
            r.stream->cancel();
            self->send(r.engine, cancel_atom::value, local);
          }
      },
      [=](relay_atom, uint64_t local) { relay_tokens(self, local); },
      [=](kv_peer_atom, const std::string& from, const std::string& plugin, const std::string& to, std::string& bytes) {
        const std::string head = self->current_sender() ? head_name(self) : "";
        if (head.empty()) {
          spdlog::error("cluster: refused a KV message of {} bytes: not from a head that proved its name", bytes.size());
          return;
        }
        if (self->state.init.kv_arrived) self->state.init.kv_arrived(from + "@" + head, plugin, to, std::move(bytes));
      },
      [=](kv_send_atom, const std::string& head, const std::string& from, const std::string& plugin, const std::string& to,
          std::string& bytes) {
        for (const auto& [node, h] : self->state.heads)
          if (h.name == head) {
            if (!h.link_handle) break;
            self->send(h.link_handle, kv_peer_atom::value, from, plugin, to, std::move(bytes));  // the link names it from@NODE
            return;
          }
        spdlog::warn("cluster: a KV message of {} bytes from {} to {}@{} dropped: no head of that name is joined", bytes.size(), from, to, head);
      },
  };
}

}  // namespace

node_actor spawn_node_actor(caf::actor_system& system, NodeInit init) { return system.spawn(node, std::move(init)); }

}  // namespace tokenhost::cluster
