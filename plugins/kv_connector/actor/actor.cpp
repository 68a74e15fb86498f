// kv_connector.actor: KV blocks between the engines of one process over the host's actor messages
// (th_host_api.peer_send and receive(); CAF moves the bytes from one engine's worker to the other's, no
// socket and no serialization).
//
// Push, as kv_connector.ucx (plugin_kv_push.hpp): every instance has a memory tier of block images
// (bounded by max_bytes, least recently used dropped first) where the blocks its peers send go. save()
// sends the blocks to every engine named in `peers` and completes when every one of them stored them
// and answered, so that when a prefill engine's save is reported its decode engine can already load
// them (disaggregation, router.disaggregated); an instance without peers keeps its saves in its own
// tier. contains() and load() read the tier alone.
//
// Messages (each a byte string from peer_send): a 4-byte tag, then
//   BLOCKS  sdk::KvBlocksHeader, n keys (8 bytes each), n images (plugin_kv_blocks.hpp's format);
//   ACK     sdk::KvAckHeader, sent back to the engine the BLOCKS came from.
// A message whose sizes disagree is refused (counted in refused_blocks) and answered with a failed
// ACK; an ACK is taken only from the peer it names. Everything runs on the engine's worker thread
// (save, receive, poll: a save's deadline is checked at each poll) but loads, which the tier's thread
// writes into the pool.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv_connector.hpp>
#include <tokenhost/plugin_kv_push.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;

constexpr const char* kId = TH_PLUGIN_ID;
constexpr uint32_t kTagBlocks = 0x4b31;
constexpr uint32_t kTagAck = 0x4b32;
// A save goes as messages of at most this many bytes (a block at least): the receiver stores each as
// it comes, and a message stays far below TH_PEER_MESSAGE_MAX_BYTES.
constexpr size_t kMessageBytes = size_t(4) << 20;

class ActorConnector : public sdk::KvPushConnector {
 public:
  explicit ActorConnector(const th_create_args& args)
      : KvPushConnector(kId, uint64_t(sdk::Config(args.config).require_int("max_bytes"))), ctx_(args.host_ctx) {
    const sdk::Config config(args.config);
    timeout_ = std::chrono::milliseconds(config.require_int("timeout_ms"));
    peers_ = sdk::split_peer_list(config.require_string("peers"));
    if (!TH_HAS_MEMBER(&sdk::host(), th_host_api, peer_send))
      throw sdk::Error(TH_ERR_UNSUPPORTED, std::string(kId) + " needs a host that carries messages between engines (th_host_api.peer_send, ABI 1.9)");
  }

  void save(const th_kv_transfer& t) {
    sdk::KvPacked packed;
    if (!pack_or_keep(t, !peers_.empty(), kMessageBytes, packed)) return;
    const uint64_t message = saves_.start(t.ticket, t.n_blocks, timeout_);
    for (uint32_t i = 0; i < peers_.size(); ++i) {
      saves_.sent(message, i);
      for (const sdk::KvPacked::Part& part : packed.parts) {
        sdk::KvBlocksHeader h = packed.header(t.namespace_id, part);
        h.message = message;
        h.peer = i;
        std::string why;
        if (!send(peers_[i], kTagBlocks, &h, sizeof h, packed.data->data() + part.offset, part.bytes(packed.image_bytes), why)) {
          saves_.fail(message, i, "cannot send to peer " + peers_[i] + ": " + why);
          break;
        }
      }
    }
    saves_.finish(message);
  }

  // The saves past their deadline fail first.
  void poll(th_kv_completion* out, uint32_t capacity, uint32_t* n_out) {
    saves_.expire([this](uint32_t i) { return peers_[i]; }, timeout_);
    KvPushConnector::poll(out, capacity, n_out);
  }

  void receive(const char* from, const char* bytes, size_t n) {
    uint32_t tag = 0;
    if (n >= sizeof tag) std::memcpy(&tag, bytes, sizeof tag);
    if (n >= sizeof tag && tag == kTagAck) return on_ack(from, bytes + sizeof tag, n - sizeof tag);
    if (n < sizeof tag || tag != kTagBlocks) {
      tier().refused(1);
      note_failure(std::string("refused a message of ") + std::to_string(n) + " bytes from " + from + ": not a message of " + kId);
      return;
    }
    bytes += sizeof tag, n -= sizeof tag;
    sdk::KvBlocksHeader h{};
    const size_t header_length = std::min(n, sizeof h);
    const std::string why = sdk::kv_blocks_refusal(bytes, header_length, n - header_length, h);
    if (!why.empty()) {
      tier().refused(std::max<uint32_t>(1, h.n_blocks <= sdk::kKvPushMaxBlocks ? h.n_blocks : 1));
      note_failure(std::string("refused a message from ") + from + " of " + why);
      if (header_length == sizeof h) answer(from, h, 0, TH_ERR_INVALID_ARGUMENT);
      return;
    }
    const size_t length = n - sizeof h;
    std::shared_ptr<sdk::KvBuffer> copy = tier().buffers().get(length);
    std::memcpy(copy->data(), bytes + sizeof h, length);
    tier().store(h.ns, h.shape, h.image_bytes, h.n_blocks, std::move(copy));
    answer(from, h, h.n_blocks, TH_OK);
  }

 private:
  // peer_send of tag, header and body as one message; false (why set) when the host refused it.
  bool send(const std::string& peer, uint32_t tag, const void* header, size_t header_bytes, const char* body, size_t body_bytes,
            std::string& why) {
    const size_t n = sizeof tag + header_bytes + body_bytes;
    if (!message_ || message_->capacity < n) message_ = tier().buffers().get(std::max(n, kMessageBytes + 256));
    char* m = message_->data();
    std::memcpy(m, &tag, sizeof tag);
    std::memcpy(m + sizeof tag, header, header_bytes);
    if (body_bytes > 0) std::memcpy(m + sizeof tag + header_bytes, body, body_bytes);
    th_error* err = nullptr;
    const th_status s = sdk::host().peer_send(ctx_, peer.c_str(), m, n, err);
    if (s == TH_OK) return true;
    why = s == TH_ERR_NOT_FOUND ? "no such engine runs" : "the host refused the message (status " + std::to_string(s) + ")";
    return false;
  }

  void answer(const std::string& to, const sdk::KvBlocksHeader& h, uint32_t stored, th_status status) {
    const sdk::KvAckHeader a{sdk::kKvPushMagic, sdk::kKvPushVersion, h.message, stored, int32_t(status), h.peer, 0};
    std::string why;
    if (!send(to, kTagAck, &a, sizeof a, nullptr, 0, why)) note_failure("cannot answer " + to + ": " + why);
  }

  void on_ack(const std::string& from, const char* bytes, size_t n) {
    sdk::KvAckHeader a{};
    if (n != sizeof a) return note_failure("ignored an answer of " + std::to_string(n) + " bytes from " + from);
    std::memcpy(&a, bytes, sizeof a);
    if (a.peer >= peers_.size() || peers_[a.peer] != from) return;  // not the peer it claims to be: ignored
    saves_.ack(a, from);  // a late one (its save expired) is ignored
  }

  void note_failure(const std::string& why) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_warning_ < std::chrono::seconds(5)) return;  // one line per few seconds, not one per message
    last_warning_ = now;
    sdk::log(ctx_, TH_LOG_WARN, std::string(kId) + ": " + why);
  }

  th_host_ctx* ctx_;
  std::chrono::milliseconds timeout_{5000};
  std::vector<std::string> peers_;
  sdk::KvSavesInFlight saves_{kId, done()};
  std::shared_ptr<sdk::KvBuffer> message_;  // the message being sent (peer_send copies it), reused
  std::chrono::steady_clock::time_point last_warning_{};
};

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] { sdk::check_host_memory_device(query, kId); });
}

const th_kv_connector_vtable kVtable = sdk::kv_connector_vtable<ActorConnector>(check);

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_KV_CONNECTOR, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
