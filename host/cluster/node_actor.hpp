// A worker node's entry for heads (published on its cluster port by cluster/transport.hpp): it
// admits a head once it has proved its name (its certificate's CN, by signing the worker's nonce),
// runs the sequences heads send on this node's engines, relays each one's tokens back as they are
// sampled, and cancels a head's sequences when that head goes away.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/messages.hpp"
#include "cluster/node_identity.hpp"
#include "cluster/wire.hpp"

namespace tokenhost::cluster {

struct NodeInit {
  std::string name;  // this node's name (its certificate's CN under TLS)
  // Its certificate and key; NULL when the manifest turned TLS off (names are then taken as stated).
  std::shared_ptr<const NodeIdentity> identity;
  // This node's engine of that name, when it serves (nullopt: none, or it is down).
  std::function<std::optional<engine_actor>(const std::string&)> find_engine;
  // The engines this node runs now, with the keys of each prefix summary whose version is not the
  // one `held` gives for it (a head's copies, by engine name; empty: every summary's keys).
  std::function<std::vector<EngineInfo>(const PrefixVersions& held)> engines;
  // This node's own admission for a head's sequence on engine (its [limits], counted with its own
  // clients' requests, so that they hold across heads): a ticket held while the sequence runs (its
  // destructor gives the admission back), or, ticket NULL, the HTTP status, Retry-After and why. Unset:
  // every sequence is admitted.
  struct Admitted {
    std::shared_ptr<void> ticket;
    uint32_t status = 0, retry_after_s = 0;
    std::string why;
  };
  std::function<Admitted(const std::string& engine, const GenerateRequest&)> admit;
  // A head's slot change on one of them, as this node's admin API would make it (it may block: it runs
  // on an actor of its own thread).
  std::function<AdminReply(const SlotChange&)> change_slot;
  // A KV connector's message from an engine of a head (named ENGINE@HEAD) to an engine here: from,
  // plugin, to, bytes. Unset: such messages are dropped.
  std::function<void(const std::string& from, const std::string& plugin, const std::string& to, std::string bytes)> kv_arrived;
};

node_actor spawn_node_actor(caf::actor_system& system, NodeInit init);

// The words both sides sign: which link (the two CAF node ids, the head's first), so that a signature
// made for one link does not open another.
std::string link_context(const caf::node_id& head, const caf::node_id& worker);

}  // namespace tokenhost::cluster
