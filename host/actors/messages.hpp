// Every message between tokenhost's actors, and the typed interface of each actor, in one place.
//
//   gateway (HTTP threads) --generate--> router --generate--> engine (scheduler) --step--> worker
//   admin API --swap/status--> router, engines, workers; --load/add/list--> registry
//
// The payload types are local to one process for now; CAF_ALLOW_UNSAFE_MESSAGE_TYPE marks them so:
// they carry plugin instances (shared_ptr) that cannot cross a network.
#pragma once

#include <atomic>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/engine_vitals.hpp"
#include "actors/kv_connectors.hpp"
#include "plugin/instance.hpp"
#include "actors/request.hpp"
#include "actors/token_stream.hpp"
#include "runtime/prefix_summary.hpp"
#include "base/step.hpp"

namespace tokenhost {

using generate_atom = caf::atom_constant<caf::atom("generate")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using swap_atom = caf::atom_constant<caf::atom("swap")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using free_atom = caf::atom_constant<caf::atom("free")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using add_atom = caf::atom_constant<caf::atom("add")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using retire_atom = caf::atom_constant<caf::atom("retire")>;
using engine_add_atom = caf::atom_constant<caf::atom("engadd")>;
using engine_remove_atom = caf::atom_constant<caf::atom("engremove")>;
using engine_replace_atom = caf::atom_constant<caf::atom("engreplace")>;
using engine_hung_atom = caf::atom_constant<caf::atom("enghung")>;
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using slide_atom = caf::atom_constant<caf::atom("slide")>;
using stage_tick_atom = caf::atom_constant<caf::atom("stagetick")>;
using kv_poll_atom = caf::atom_constant<caf::atom("kvpoll")>;
using kv_peer_atom = caf::atom_constant<caf::atom("kvpeer")>;

// Where a worker's KV memory stands: what the scheduler needs each step.
struct KvState {
  uint32_t total_blocks = 0;
  uint32_t free_blocks = 0;  // free, plus the cached blocks the plugin takes back when it needs them
  uint32_t block_size = 0;
  // Prefix caching (th_kv_stats, ABI 1.5; 0 for an older plugin): blocks kept for reuse that no
  // sequence holds (counted in free_blocks too), cached blocks taken back and blocks published since
  // the plugin was created.
  uint32_t cached_blocks = 0;
  uint64_t evicted_blocks = 0, published_blocks = 0;
  // The blocks the sequences hold, a shared block once per holder (th_kv_stats.held_blocks), when the
  // plugin reports it; else the blocks in use.
  uint32_t held_blocks = 0;
  // The free blocks without the cached ones: what holds nothing at all (gauges, admin status).
  uint32_t uncached_free_blocks() const { return free_blocks - std::min(cached_blocks, free_blocks); }
};
// What a kvcache with prefix caching had of a new sequence's prompt (th_kvcache_vtable.seq_lookup).
struct LookupResult {
  uint32_t n_cached = 0;  // positions of the prompt the sequence starts with
  // Positions after those a KV connector is loading into blocks the sequence holds (TH_SEQ_LOADING
  // until a kv_poll reports the load done).
  uint32_t loading = 0;
  // A KV connector (or the kvcache while a load was set up) threw: the engine stops for it, as for a
  // step plugin's fault (its requests end, the supervisor rebuilds it).
  std::optional<PluginFault> fault;
  std::string error;      // the lookup failed: the sequence computes its whole prompt
  KvState kv;
};
// The loads KV connectors finished since the last poll (KvConnectors::poll), and the pool after them.
struct KvPollResult {
  std::vector<KvLoadDone> loads;
  uint32_t loads_out = 0;  // loads still out after this poll (those of sequences ended meanwhile included)
  std::vector<uint64_t> saving;  // sequences whose saves are still out (a handoff waits for none)
  KvState kv;
  std::optional<PluginFault> fault;  // a connector's poll threw: the engine stops for it
};
// A sliding window's release of a sequence's oldest window blocks (th_kvcache_vtable.seq_drop_blocks,
// then its later keys re-rotated by the backend), or why it failed: TH_ERR_RESOURCE_EXHAUSTED when the
// pool lacked the blocks to copy shared ones (nothing changed), TH_ERR_INTERNAL otherwise.
struct SlideResult {
  std::string error;
  th_status status = TH_OK;
  KvState kv;
  std::optional<PluginFault> fault;  // a plugin threw: the engine cannot go on (engine_vitals.hpp)
};
struct StepResult {
  // The tokens of each item with sample set, in item order: accepted[i] verified draft tokens and then
  // the next token, accepted[i] + 1 in all (1 for an item without a draft).
  std::vector<SampledToken> sampled;
  std::vector<uint32_t> accepted;     // per item with sample set
  // Per item with sample set: the draft tokens verified (the item's n_draft, or 0 when the pool could
  // not hold its draft and the worker dropped it).
  std::vector<uint32_t> drafted;
  std::string error;                  // the step failed as a whole: why
  // A plugin threw during the step (plugin/plugin_fault.hpp): its state is unknown, so the engine
  // fails its requests and stops, to be rebuilt (actors/engine_vitals.hpp). error says the same.
  std::optional<PluginFault> fault;
  // The failure's status: TH_ERR_RESOURCE_EXHAUSTED when the kvcache plugin had no blocks for the
  // step (the engine preempts and retries), TH_ERR_INTERNAL for any other failure; TH_OK on success.
  th_status status = TH_OK;
  double seconds = 0;
  KvState kv;                         // the KV pool after the step
  // Per item: the leading positions a relookup found cached (computed by no one in this step; 0 for
  // most items). They end where the item's tokens end either way: only the count of reuse changes.
  std::vector<uint32_t> reused;
  // Per item: the scored rows' log-probabilities of the token after each (StepItem::score), in row
  // order; empty for an item not scored.
  std::vector<std::vector<SampledToken>> scores;
  // Per item with sample set, when any failed alone: why that sequence cannot go on ("" for the
  // others; empty when none failed). A constrained sequence whose constraint allows no token, or whose
  // plugin refused its source, ends with this error; the step's other sequences go on.
  std::vector<std::string> item_errors;
};

// Replace the plugin of a slot with a new instance (already checked and created).
struct SlotSwap {
  SlotId slot;
  std::shared_ptr<PluginInstance> instance;
  uint64_t requested_ns = 0;  // steady clock when the admin call arrived: for the swap latency
  // The engine held no sequence when the swap reached it: the new plugin is in effect at once (its
  // latency ends there, not at the next request's first step).
  bool engine_idle = false;
  // A stacking slot (SlotInfo::stacks) changes one layer: `instance` replaces layer `layer`, is
  // inserted before it (layer == the stack's size: appended), or layer `layer` is removed (no instance).
  enum class LayerOp : uint8_t { none, replace, insert, remove };
  LayerOp layer_op = LayerOp::none;
  uint32_t layer = 0;
};

struct SwapResult {
  bool ok = false;
  std::string message;  // what changed, or why nothing did
};

// A JSON document (nlohmann::json::dump) describing an actor's state, for the admin API.
struct StatusJson {
  std::string json;
};


// A plugin library the registry opened (or registered), or why it could not.
struct LoadReply {
  std::optional<PluginManifest> manifest;
  std::shared_ptr<PluginLibrary> library;  // NULL for add_atom, or on error
  std::string error;
  bool not_found = false;  // the id or file is unknown, rather than broken
};

// The plugin registry: owns the catalog of plugin manifests and opens libraries.
using registry_actor = caf::typed_actor<
    caf::replies_to<load_atom, std::string>::with<LoadReply>,  // plugin id: re-read its plugin.toml, open it
    caf::replies_to<add_atom, std::string>::with<LoadReply>,   // plugin.toml path: make it known
    caf::replies_to<list_atom>::with<StatusJson>>;

using worker_actor = caf::typed_actor<
    caf::replies_to<step_atom, StepBatch>::with<StepResult>,
    caf::replies_to<free_atom, uint64_t>::with<KvState>,  // drop a sequence's KV blocks
    // A new sequence (request id, salt, prompt) takes the longest cached prefix of its prompt.
    caf::replies_to<lookup_atom, uint64_t, uint64_t, std::vector<int32_t>>::with<LookupResult>,
    caf::replies_to<flush_atom>::with<KvState>,  // the prefix cache dropped (its unheld blocks freed)
    // Sliding window: sequence, first block, blocks, positions held: those blocks released, the later
    // positions moved down and their keys re-rotated.
    caf::replies_to<slide_atom, uint64_t, uint32_t, uint32_t, uint32_t>::with<SlideResult>,
    caf::replies_to<status_atom>::with<KvState>,
    caf::replies_to<swap_atom, SlotSwap>::with<SwapResult>,
    caf::replies_to<status_atom, std::string>::with<StatusJson>,
    caf::replies_to<kv_poll_atom>::with<KvPollResult>,  // KV connectors: the loads finished
    // A KV connector's message from another engine (th_host_api.peer_send): from, plugin, bytes.
    caf::reacts_to<kv_peer_atom, std::string, std::string, std::string>>;

using engine_actor = caf::typed_actor<
    caf::replies_to<generate_atom, GenerateRequest>::with<GenerateResult>,
    caf::replies_to<swap_atom, SlotSwap>::with<SwapResult>,
    caf::replies_to<status_atom, std::string>::with<StatusJson>,
    caf::reacts_to<cancel_atom, uint64_t>,  // request id: finish it as "cancelled", free its KV blocks
    caf::reacts_to<drain_atom>,   // finish nothing new: fail waiting requests, stop when idle
    caf::reacts_to<retire_atom>,  // take nothing new, finish every request already taken, then stop
    caf::reacts_to<tick_atom>>;   // internal: run the next step

// An engine as the router knows it: its name, the model it serves, its actor, and what its prefix
// cache holds (runtime/prefix_summary.hpp; NULL when it keeps none).
struct RoutedEngine {
  std::string name;
  std::string model;
  engine_actor actor;
  std::shared_ptr<const PrefixSummary> prefix_summary;
  // How it ended (engine_vitals.hpp), for the router's words when it stops unasked; may be NULL.
  std::shared_ptr<const EngineVitals> vitals;
  // Sequences it runs at once (its max_step_seqs): the overload guard's measure of full
  // (routing/overload.hpp).
  uint32_t capacity = 64;
  // Where it runs: the cluster node's name ("" for an engine of this process) and the round trip of
  // this node's link to it in seconds (NULL for a local engine; -1 before the first heartbeat), for
  // th_route_request.candidate_nodes and candidate_rtt_s.
  std::string node{};
  std::shared_ptr<const std::atomic<double>> rtt_s{};
  th_engine_role role = TH_ROLE_BOTH;  // its manifest's role (th_route_request.candidate_roles)
};

using router_actor = caf::typed_actor<
    caf::replies_to<generate_atom, GenerateRequest>::with<GenerateResult>,
    caf::replies_to<swap_atom, SlotSwap>::with<SwapResult>,
    caf::replies_to<engine_add_atom, RoutedEngine>::with<SwapResult>,      // route to a new engine too
    caf::replies_to<engine_replace_atom, RoutedEngine>::with<SwapResult>,  // same name: new requests go to the new one, the old retires
    caf::replies_to<engine_remove_atom, std::string>::with<SwapResult>,    // route no more to it; it retires
    // Engine (name) hung (why): route no more to it, and its requests end now with the reason.
    caf::replies_to<engine_hung_atom, std::string, std::string>::with<SwapResult>,
    caf::replies_to<status_atom, std::string>::with<StatusJson>,
    caf::reacts_to<cancel_atom, uint64_t>,  // sequence id: passed to the engines that hold its plan's sequences
    caf::reacts_to<drain_atom>,
    // Internal: a cascade stage's stream of client sequence id has new tokens.
    caf::reacts_to<stage_tick_atom, uint64_t>>;

}  // namespace tokenhost

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::GenerateRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::GenerateResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::StepBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::StepResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::SlotSwap)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::RoutedEngine)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::SwapResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::StatusJson)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::KvState)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::LookupResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::SlideResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::KvPollResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tokenhost::LoadReply)
