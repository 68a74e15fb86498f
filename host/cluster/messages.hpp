// The messages between the nodes of a cluster and the typed interface of each actor that sends or
// receives them. Only atoms, integers and byte strings cross the network (cluster/wire.hpp says why):
//
//   head: link (one per worker) --hello/prove/ping--> worker: node actor
//   head: engine proxy (one per remote engine) --generate/cancel--> node actor --generate--> engine
//   head: admin API (a remote engine's slot) --slot--> node actor --> this node's admin operation
//   node actor --tokens--> engine proxy (each batch of a sequence's tokens as they are sampled)
//   head: link <--kvpeer--> worker: node actor (KV connectors' messages, th_host_api.peer_send, both ways)
#pragma once

#include <cstdint>
#include <string>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace tokenhost::cluster {

using hello_atom = caf::atom_constant<caf::atom("hello")>;
using prove_atom = caf::atom_constant<caf::atom("prove")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using tokens_atom = caf::atom_constant<caf::atom("tokens")>;
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using slot_atom = caf::atom_constant<caf::atom("slot")>;
using kv_send_atom = caf::atom_constant<caf::atom("kvsend")>;

// A worker's entry for heads, published on its cluster port.
using node_actor = caf::typed_actor<
    // Hello (wire.hpp) -> Welcome: the worker's name, certificate, its signature over the head's
    // nonce, a nonce of its own, and its engines.
    caf::replies_to<hello_atom, std::string>::with<std::string>,
    // The head's signature over the worker's nonce -> "" (the head may send work) or why not.
    caf::replies_to<prove_atom, std::string>::with<std::string>,
    // Heartbeat: the head's clock and the prefix summary versions it holds (wire: PrefixVersions) ->
    // the clock, echoed, and the engines as they are now (wire: engines; with the keys of each prefix
    // summary whose version the head does not hold).
    caf::replies_to<ping_atom, uint64_t, std::string>::with<uint64_t, std::string>,
    // RemoteGenerate -> GenerateResult (wire), its tokens sent to the sender as they come.
    caf::replies_to<generate_atom, std::string>::with<std::string>,
    // SlotChange -> AdminReply (wire): a head's admin API changes a slot of an engine here.
    caf::replies_to<slot_atom, std::string>::with<std::string>,
    caf::reacts_to<cancel_atom, uint64_t>,  // sequence id: as an engine's cancel
    // A KV connector's message from a head's engine: from (its engine there), plugin, to (an engine
    // here), bytes; delivered with the sender named from@HEAD.
    caf::reacts_to<kv_peer_atom, std::string, std::string, std::string, std::string>,
    // Internal, from this process's KvPeerPost: head, from, plugin, to (an engine of the head), bytes.
    caf::reacts_to<kv_send_atom, std::string, std::string, std::string, std::string, std::string>,
    caf::reacts_to<relay_atom, uint64_t>>;  // internal: sequence id's stream has new tokens

// The head's link to one worker (cluster/link.hpp).
using link_actor = caf::typed_actor<
    caf::reacts_to<beat_atom, uint64_t>,  // internal: its timer (heartbeats while up, new attempts while down)
    // From this process's KvPeerPost: from (an engine here), plugin, to (an engine of the worker), bytes;
    // sent to the worker's node actor while the link is up, dropped (and logged) while it is down.
    caf::reacts_to<kv_send_atom, std::string, std::string, std::string, std::string>,
    // From the worker's node actor: from (ENGINE@NODE), plugin, to (an engine here), bytes.
    caf::reacts_to<kv_peer_atom, std::string, std::string, std::string, std::string>>;

// A remote engine's stand-in on the head: an engine actor to the router, plus the tokens it is sent
// and the loss of its node (why): it answers what it had in flight and ends (engine_proxy.hpp).
using engine_proxy_actor = engine_actor::extend<caf::reacts_to<tokens_atom, std::string>, caf::reacts_to<lost_atom, std::string>>;

}  // namespace tokenhost::cluster
