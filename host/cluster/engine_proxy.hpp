// A remote engine's stand-in on the head: to the router it is an engine actor like a local one. Each
// sequence it is given goes to the worker's node actor (cluster/node_actor.hpp) without its token
// stream; the tokens the worker relays back are pushed into that stream as they come (held back to the
// end when no client reads them live, GenerateRequest::live: then a sequence whose node is lost can
// run again elsewhere), and a stream the client cancelled is cancelled on the worker at the next batch.
// Slots of a remote engine change through the head's admin API (server/), not through this actor: its
// swap is refused.
#pragma once

#include <memory>
#include <string>

#include "actors/engine_vitals.hpp"
#include "cluster/messages.hpp"

namespace tokenhost::cluster {

struct EngineProxyInit {
  std::string name;         // as the head routes to it ("ENGINE@NODE")
  std::string remote_name;  // its name on its node
  std::string node_name;
  node_actor node;
};

engine_proxy_actor spawn_engine_proxy(caf::actor_system& system, EngineProxyInit init);

}  // namespace tokenhost::cluster
