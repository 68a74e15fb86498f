// CAF's network layer for a cluster node, set up once per actor system: the middleman, and CAF's
// OpenSSL module with this node's certificate, key and the cluster's CA (mutual TLS: a peer without a
// certificate of the CA never gets past the handshake). The module's traps (shared/STACK.md) are
// closed here: without certificates it would run anonymous TLS and say nothing, so a TLS node checks
// that authentication is on before it listens or connects; an encrypted or mismatched key would hang
// a connect, so the files are checked (cluster/node_identity.hpp) before CAF reads them.
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "cluster/messages.hpp"
#include "cluster/node_identity.hpp"
#include "manifest/cluster_decl.hpp"

namespace tokenhost::cluster {

// This node's identity from the manifest's files, checked (NULL when TLS is off). Throws
// std::runtime_error naming the file and what is wrong.
std::shared_ptr<const NodeIdentity> load_identity(const ClusterDecl& c);

// Loads the middleman (and, under TLS, the OpenSSL module with the identity's files) into cfg:
// before the actor system is made from it.
void configure(caf::actor_system_config& cfg, const ClusterDecl& c);

// After the system is made: refuses (std::runtime_error) a TLS node whose module would not
// authenticate peers.
void check_transport(caf::actor_system& system, const ClusterDecl& c);

// Publishes node on [cluster] listen (TLS unless turned off); returns the port. Throws
// std::runtime_error naming the address when it cannot.
uint16_t publish_node(caf::actor_system& system, const ClusterDecl& c, const node_actor& node);

}  // namespace tokenhost::cluster
