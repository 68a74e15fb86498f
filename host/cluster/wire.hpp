// What the nodes of a cluster say to each other, and its encoding. Every message between nodes is an
// atom and one byte string: the string is MessagePack (nlohmann::json's to_msgpack), written and read
// here alone. Byte strings are the only payload because CAF moves them ~5x faster than its own
// serialization of a vector (shared/STACK.md), they need no type announcement on either side, and
// their decoding is ours to check: a peer's bytes are outside input. Every decoder checks each field's
// type and bound and throws WireError naming the message and the field; nothing a peer sends can make
// a decoder crash, allocate without bound or return a value outside the ranges stated here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.hpp"

namespace tokenhost::cluster {

// A peer's message that does not decode: what (message and field) and why.
struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The protocol's version: a hello of another version is refused by name.
constexpr uint32_t kWireVersion = 1;

// Bounds on what a peer may send (a message above them is refused, not truncated).
constexpr size_t kMaxWireBytes = size_t(64) << 20;     // one message
constexpr size_t kMaxWireTokens = size_t(1) << 22;     // a prompt or an answer
constexpr size_t kMaxWireString = size_t(1) << 20;     // a name, an error, a prompt's text
constexpr size_t kMaxWireEngines = 4096;               // engines one node announces
constexpr size_t kMaxWirePrefixKeys = size_t(1) << 16;  // one prefix summary's keys (PrefixSummary::kMaxBlocks)
constexpr uint32_t kMaxWireTopLogprobs = 64;

// One engine a node runs, as the head sees it: its name on that node, what it serves, the facts its
// build measured and its plugins by slot.
struct EngineInfo {
  std::string name, model, device;
  uint64_t kv_positions = 0;
  bool prefix_cache = false;
  uint32_t window_cap = 0;
  uint32_t capacity = 64;  // sequences it runs at once (its max_step_seqs; 64 from a node that sent none)
  std::string role = "both";  // in prefill/decode disaggregation: "both", "prefill" or "decode"
  std::map<std::string, std::string> plugins;  // slot name -> plugin id
  bool serving = true;
  std::string down_reason;
  // Its prefix cache's summary (runtime/prefix_summary.hpp), for the head's cache-aware routing: the
  // block size and the summary's version, and its keys (oldest first) when the head's copy is of
  // another version (has_prefix_keys); a heartbeat without a change carries no keys.
  uint32_t prefix_block = 0;
  uint64_t prefix_version = 0;
  bool has_prefix_keys = false;
  std::vector<uint64_t> prefix_keys;
};

// The versions of the prefix summaries a head holds of a node's engines, by the engine's name there:
// sent with each heartbeat so that the node sends only the summaries that changed.
struct PrefixVersions {
  std::map<std::string, uint64_t> versions;
};

// The first message on a link (the connecting node to the listening one), and the listener's answer.
// Each side proves its name: it signs hello_message(...) over the other's nonce with the key of the
// certificate it sends (cluster/node_identity.hpp).
struct Hello {
  uint32_t version = kWireVersion;
  std::string node;         // the sender's name
  std::string certificate;  // PEM
  std::string nonce;        // 32 random bytes for the other side to sign
  std::string signature;    // over the other side's nonce ("" in the first hello: it has none yet)
  std::string role;         // "head" or "worker"
};
struct Welcome {
  Hello hello;                      // the listener's name, certificate, nonce and signature
  std::vector<EngineInfo> engines;  // what it runs now
};

// A sequence for one of the node's engines: the request without its stream (the node makes its own
// and relays each token back), plus the engine it goes to, by its name on that node.
struct RemoteGenerate {
  std::string engine;
  GenerateRequest request;  // stream NULL
};

// A batch of tokens of one sequence, in order, from offset `first` of its answer.
struct TokenBatch {
  uint64_t seq = 0;
  uint64_t first = 0;
  std::vector<SampledToken> tokens;
};

// A slot change for one of the node's engines, from a head's admin API (`tokenhost admin swap` or
// `unload` naming a remote engine): the plugin by id ("" to empty an optional slot), its config as
// TOML text (an inline table's body is not enough: the node parses it as a document).
struct SlotChange {
  std::string engine, slot, plugin, config_toml;
};
// What a node's admin operation answered: ok and what changed, or the admin API's status for the
// refusal (400-599) and why.
struct AdminReply {
  bool ok = false;
  uint32_t status = 200;
  std::string message;
};

std::string encode(const Hello& m);
std::string encode(const Welcome& m);
std::string encode(const RemoteGenerate& m);
std::string encode(const TokenBatch& m);
std::string encode(const GenerateResult& m);
std::string encode(const std::vector<EngineInfo>& m);
std::string encode(const SlotChange& m);
std::string encode(const AdminReply& m);
std::string encode(const PrefixVersions& m);

// The decoders: throw WireError naming the message and field.
Hello decode_hello(std::string_view bytes);
Welcome decode_welcome(std::string_view bytes);
RemoteGenerate decode_generate(std::string_view bytes);
TokenBatch decode_tokens(std::string_view bytes);
GenerateResult decode_result(std::string_view bytes);
std::vector<EngineInfo> decode_engines(std::string_view bytes);
SlotChange decode_slot_change(std::string_view bytes);
AdminReply decode_admin_reply(std::string_view bytes);
PrefixVersions decode_prefix_versions(std::string_view bytes);

}  // namespace tokenhost::cluster
