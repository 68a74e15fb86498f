#include "cluster/link.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>

#include "cluster/node_actor.hpp"

namespace tokenhost::cluster {

void LinkHealth::set_state(const std::string& state, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (state == "up" && state_ != "up") ++joins_;
  state_ = state;
  why_ = why;
}

void LinkHealth::beat(double rtt_ms) {
  std::lock_guard lock(mutex_);
  rtt_ms_ = rtt_ms;
  rtt_s_.store(rtt_ms / 1000.0, std::memory_order_relaxed);
  last_beat_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  ++beats_;
}

std::string LinkHealth::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

nlohmann::json LinkHealth::json() const {
  std::lock_guard lock(mutex_);
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json j{{"state", state_},
                   {"rtt_ms", rtt_ms_},
                   {"heartbeats", beats_},
                   {"joins", joins_},
                   {"messages_sent", sent_messages_.load()},
                   {"bytes_sent", sent_bytes_.load()},
                   {"messages_received", received_messages_.load()},
                   {"bytes_received", received_bytes_.load()}};
  j["last_heartbeat_ms_ago"] = last_beat_ms_ == 0 ? nlohmann::json(nullptr) : nlohmann::json(now - last_beat_ms_);
  if (!why_.empty()) j["why"] = why_;
  return j;
}

namespace {

using clock = std::chrono::steady_clock;

struct LinkState {
  LinkInit init;
  node_actor node;            // while up
  std::string nonce;          // ours, for the worker to sign
  clock::time_point last_reply = clock::now();
  uint64_t epoch = 0;         // one per connection attempt: replies of an earlier one are ignored
  uint64_t timers = 0;        // the beat timer that counts: one loop at a time (up: heartbeats; down: retries)
  bool up = false;
  static inline const char* name = "tokenhost.cluster.link";
};

using link_ptr = link_actor::stateful_pointer<LinkState>;

uint64_t now_us() {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(clock::now().time_since_epoch()).count());
}

void connect(link_ptr self);

// The link is down (why): the server hears of it once, and a new attempt follows after the interval.
void lost(link_ptr self, const std::string& why) {
  auto& s = self->state;
  ++s.epoch;
  if (s.up) {
    s.up = false;
    spdlog::error("cluster: worker {} lost: {}", s.init.node, why);
    s.init.left(s.init.node, why);
  } else {
    spdlog::warn("cluster: worker {} at {}:{} not joined: {}", s.init.node, s.init.host, s.init.port, why);
  }
  if (s.node) self->demonitor(caf::actor_cast<caf::actor_addr>(s.node));
  s.node = nullptr;
  s.init.health->set_state("down", why);
  self->delayed_send(self, s.init.reconnect, beat_atom::value, ++s.timers);
}

void hello(link_ptr self, node_actor node) {
  auto& s = self->state;
  const uint64_t epoch = s.epoch;
  Hello h;
  h.node = s.init.self_name;
  h.role = "head";
  h.nonce = make_nonce();
  if (s.init.identity) h.certificate = s.init.identity->certificate_pem();
  s.nonce = h.nonce;
  const std::string bytes = encode(h);
  s.init.health->count_sent(bytes.size());
  self->request(node, s.init.connect_timeout, hello_atom::value, bytes)
      .then(
          [=](const std::string& reply) {
            auto& st = self->state;
            if (epoch != st.epoch) return;
            st.init.health->count_received(reply.size());
            Welcome w;
            try {
              w = decode_welcome(reply);
            } catch (const WireError& e) {
              return lost(self, std::string("its welcome does not decode: ") + e.what());
            }
            if (w.hello.role != "worker") return lost(self, "it is not a worker (role " + w.hello.role + ")");
            if (w.hello.node != st.init.node)
              return lost(self, "it says it is node '" + w.hello.node + "', the manifest expects '" + st.init.node + "'");
            std::string proof;
            if (st.init.identity) {
              const std::string context = link_context(self->node(), node.node());
              PeerCheck c = st.init.identity->verify_peer(
                  w.hello.certificate, NodeIdentity::hello_message("welcome", w.hello.node, st.init.self_name, st.nonce, context),
                  w.hello.signature, st.init.node);
              if (!c.ok()) return lost(self, "its identity is refused: " + c.error);
              proof = st.init.identity->sign(NodeIdentity::hello_message("prove", st.init.self_name, w.hello.node, w.hello.nonce, context));
            }
            st.init.health->count_sent(proof.size());
            self->request(node, st.init.connect_timeout, prove_atom::value, proof)
                .then(
                    [=](const std::string& refusal) {
                      auto& s2 = self->state;
                      if (epoch != s2.epoch) return;
                      if (!refusal.empty()) return lost(self, "it refused this head: " + refusal);
                      s2.node = node;
                      s2.up = true;
                      s2.last_reply = clock::now();
                      self->monitor(node);
                      s2.init.health->set_state("up");
                      spdlog::info("cluster: worker {} joined from {}:{} with {} engine(s)", s2.init.node, s2.init.host, s2.init.port,
                                   w.engines.size());
                      s2.init.joined(s2.init.node, node, w.engines);
                      self->delayed_send(self, s2.init.heartbeat, beat_atom::value, ++s2.timers);
                    },
                    [=](caf::error& e) {
                      if (epoch == self->state.epoch) lost(self, "no answer to the proof: " + self->system().render(e));
                    });
          },
          [=](caf::error& e) {
            if (epoch == self->state.epoch) lost(self, "no answer to hello: " + self->system().render(e));
          });
}

void connect(link_ptr self) {
  auto& s = self->state;
  const uint64_t epoch = ++s.epoch;
  s.init.health->set_state("connecting");
  // The OpenSSL module's middleman under TLS, the plain one without: either answers a connect with
  // the published actor, asynchronously, so that the attempt is bounded by the request's timeout.
  caf::io::middleman_actor mm = s.init.identity ? self->system().openssl_manager().actor_handle() : self->system().middleman().actor_handle();
  self->request(mm, s.init.connect_timeout, caf::connect_atom::value, s.init.host, s.init.port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>& ifs) {
            if (epoch != self->state.epoch) return;
            if (!ptr) return lost(self, "no actor is published on its port");
            if (ifs != self->system().message_types<node_actor>())
              return lost(self, "the actor on its port is not a tokenhost node (another version?)");
            hello(self, caf::actor_cast<node_actor>(ptr));
          },
          [=](caf::error& e) {
            if (epoch == self->state.epoch) lost(self, "cannot connect: " + self->system().render(e));
          });
}

// A heartbeat: a ping while up (a link whose last answer is older than the timeout is lost), a new
// connection attempt while down.
void beat(link_ptr self, uint64_t timer) {
  auto& s = self->state;
  if (timer != s.timers) return;  // a loop that an end or a join replaced
  if (!s.up) return connect(self);
  if (clock::now() - s.last_reply > s.init.heartbeat_timeout) {
    return lost(self, "no heartbeat for " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - s.last_reply).count()) + " ms");
  }
  const uint64_t epoch = s.epoch;
  const std::string held = encode(s.init.held_prefixes ? s.init.held_prefixes(s.init.node) : PrefixVersions{});
  s.init.health->count_sent(8 + held.size());
  self->request(s.node, s.init.heartbeat_timeout, ping_atom::value, now_us(), held)
      .then(
          [=](uint64_t sent_us, const std::string& engines) {
            auto& st = self->state;
            if (epoch != st.epoch) return;
            st.last_reply = clock::now();
            st.init.health->count_received(8 + engines.size());
            st.init.health->beat(double(now_us() - sent_us) / 1000.0);
            try {
              st.init.engines_changed(st.init.node, decode_engines(engines));
            } catch (const WireError& e) {
              spdlog::error("cluster: worker {} sent engines that do not decode: {}", st.init.node, e.what());
            }
          },
          [=](caf::error&) {});  // the next beat decides
  self->delayed_send(self, s.init.heartbeat, beat_atom::value, s.timers);
}

link_actor::behavior_type link(link_ptr self, LinkInit init) {
  self->state.init = std::move(init);
  self->set_down_handler([self](caf::down_msg& down) {
    if (self->state.node && down.source == self->state.node.address()) lost(self, "its node went down: " + self->system().render(down.reason));
  });
  connect(self);
  return {
      [=](beat_atom, uint64_t timer) { beat(self, timer); },
      [=](kv_send_atom, const std::string& from, const std::string& plugin, const std::string& to, std::string& bytes) {
        auto& s = self->state;
        if (!s.up) {
          spdlog::warn("cluster: a KV message of {} bytes from {} to {}@{} dropped: the worker is not joined", bytes.size(), from, to, s.init.node);
          return;
        }
        s.init.health->count_sent(bytes.size());
        self->send(s.node, kv_peer_atom::value, from, plugin, to, std::move(bytes));
      },
      [=](kv_peer_atom, const std::string& from, const std::string& plugin, const std::string& to, std::string& bytes) {
        auto& s = self->state;
        if (!s.up || self->current_sender() == nullptr || self->current_sender()->address() != s.node.address()) return;  // only its node's
        s.init.health->count_received(bytes.size());
        if (s.init.kv_arrived) s.init.kv_arrived(from + "@" + s.init.node, plugin, to, std::move(bytes));
      }};
}

}  // namespace

link_actor spawn_link(caf::actor_system& system, LinkInit init) { return system.spawn(link, std::move(init)); }

}  // namespace tokenhost::cluster
