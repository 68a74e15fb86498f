// tokenhost plugin SDK: what a KV connector that pushes saves into its peers' memory tiers needs
// (kv_connector.ucx over UCX, kv_connector.actor over the host's messages), C++17. Adds no ABI.
//
// The scheme: every instance keeps a memory tier of block images (bounded, least recently used dropped
// first) where the blocks its peers send go; save() sends the blocks to every peer as BLOCKS messages and
// completes once every peer stored them and answered with an ACK (or fails, naming the peer, when one
// refuses or stays silent past a deadline); contains() and load() read the tier alone. What:
//   - sdk::KvBlocksHeader, sdk::KvAckHeader, sdk::kv_blocks_refusal(): the two messages and the checks a
//     received BLOCKS message passes before anything of it is stored;
//   - sdk::KvBuffer, sdk::KvBuffers: message buffers, reused (fresh memory costs a page fault per 4 KiB);
//   - sdk::KvPacked, sdk::pack_kv_save(): a save's blocks read into parts of at most a message's size,
//     each its keys then its images;
//   - sdk::KvMemoryTier: the tier, with a thread that writes loads into the pool (load() never blocks
//     the engine's worker);
//   - sdk::KvSavesInFlight: sent saves waiting for their peers' ACKs, completed through KvCompletions;
//   - sdk::split_peer_list(): a `peers` setting's comma-separated names, trimmed;
//   - sdk::KvPushConnector: what such a connector's instance has besides its transport (the tier, the
//     completions, contains/load/poll/cancel/stats, and the part of save() before anything is sent).
#ifndef TOKENHOST_PLUGIN_KV_PUSH_HPP
#define TOKENHOST_PLUGIN_KV_PUSH_HPP

#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv_blocks.hpp>
#include <tokenhost/plugin_kv_connector.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tokenhost::sdk {

constexpr uint32_t kKvPushMagic = 0x564b4854;  // "THKV"
constexpr uint32_t kKvPushVersion = 1;
constexpr uint32_t kKvPushMaxBlocks = 1u << 16;    // per message
constexpr uint64_t kKvPushMaxImageBytes = 1ull << 30;

// "a, b,c" -> {"a", "b", "c"}: blanks around names and empty names dropped.
inline std::vector<std::string> split_peer_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

// BLOCKS: followed by n_blocks keys (8 bytes each) then n_blocks images (plugin_kv_blocks.hpp's format).
struct KvBlocksHeader {
  uint32_t magic, version;
  uint64_t message, ns, shape, image_bytes;
  uint32_t n_blocks;
  uint32_t peer;  // the sender's number for the receiver, echoed in the ACK
};
// ACK: the receiver's answer to one BLOCKS message.
struct KvAckHeader {
  uint32_t magic, version;
  uint64_t message;
  uint32_t stored;
  int32_t status;  // a th_status
  uint32_t peer;   // KvBlocksHeader.peer
  uint32_t reserved;
};

// Checks a BLOCKS header of header_length bytes against the length of what follows it, filling h;
// "" when they agree, else what is wrong (for the log).
inline std::string kv_blocks_refusal(const void* header, size_t header_length, size_t length, KvBlocksHeader& h) {
  if (header_length != sizeof h) return "a header of " + std::to_string(header_length) + " bytes";
  std::memcpy(&h, header, sizeof h);
  if (h.magic != kKvPushMagic || h.version != kKvPushVersion) return "an unknown format";
  if (h.n_blocks == 0 || h.n_blocks > kKvPushMaxBlocks) return std::to_string(h.n_blocks) + " blocks";
  if (h.image_bytes == 0 || h.image_bytes > kKvPushMaxImageBytes) return "images of " + std::to_string(h.image_bytes) + " bytes";
  if (length != uint64_t(h.n_blocks) * (sizeof(uint64_t) + h.image_bytes))
    return std::to_string(length) + " bytes for " + std::to_string(h.n_blocks) + " blocks of " + std::to_string(h.image_bytes);
  return "";
}

// A message's bytes, uninitialized when made (not zeroed: every byte is written).
struct KvBuffer {
  KvBuffer(std::unique_ptr<char[]> b, size_t n, size_t c) : bytes(std::move(b)), size(n), capacity(c) {}
  std::unique_ptr<char[]> bytes;
  size_t size, capacity;
  char* data() const { return bytes.get(); }
};

// Buffers given back and handed out again. A save's buffer is tens of megabytes: fresh memory costs a
// page fault per 4 KiB on first touch (on a virtual machine, more than the copy itself), so buffers
// of sent messages and of blocks the tier dropped are kept (up to kKeepBytes) for the next of a
// similar size. Thread-safe; hold it by shared_ptr (a buffer finds its way home through a weak one).
class KvBuffers : public std::enable_shared_from_this<KvBuffers> {
 public:
  static constexpr size_t kKeepBytes = size_t(256) << 20;
  std::shared_ptr<KvBuffer> get(size_t n) {
    std::unique_ptr<char[]> bytes;
    size_t capacity = n;
    {
      std::lock_guard lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->second >= n && it->second <= 2 * n) {  // not a much larger one: it would hold memory idle
          bytes = std::move(it->first);
          capacity = it->second;
          kept_ -= capacity;
          free_.erase(it);
          break;
        }
    }
    if (!bytes) bytes.reset(new char[std::max<size_t>(n, 1)]);
    std::weak_ptr<KvBuffers> home = weak_from_this();
    return std::shared_ptr<KvBuffer>(new KvBuffer(std::move(bytes), n, capacity), [home](KvBuffer* b) {
      if (auto pool = home.lock()) pool->put(std::move(b->bytes), b->capacity);
      delete b;
    });
  }

 private:
  void put(std::unique_ptr<char[]> bytes, size_t capacity) {
    std::lock_guard lock(mutex_);
    if (kept_ + capacity > kKeepBytes) return;  // freed
    kept_ += capacity;
    free_.emplace_back(std::move(bytes), capacity);
  }
  std::mutex mutex_;
  std::deque<std::pair<std::unique_ptr<char[]>, size_t>> free_;
  size_t kept_ = 0;
};

// A save's blocks read out of the pool: parts of at most message_bytes (a block at least), each
// n_blocks keys then n_blocks images, one after another in data.
struct KvPacked {
  struct Part {
    size_t offset = 0;  // in data
    uint32_t n_blocks = 0;
    size_t bytes(size_t image_bytes) const { return size_t(n_blocks) * (sizeof(uint64_t) + image_bytes); }
  };
  uint64_t shape = 0;       // kv_shape_fingerprint of the layout
  size_t image_bytes = 0;   // per block
  std::shared_ptr<KvBuffer> data;
  std::vector<Part> parts;
  // A BLOCKS header of this save for part (message and peer left to the sender).
  KvBlocksHeader header(uint64_t ns, const Part& part) const {
    return KvBlocksHeader{kKvPushMagic, kKvPushVersion, 0, ns, shape, image_bytes, part.n_blocks, 0};
  }
};

// Reads t's blocks now (the host may reuse them once save() returns). t was checked (check_kv_transfer).
inline KvPacked pack_kv_save(const th_kv_transfer& t, KvBuffers& buffers, size_t message_bytes) {
  KvPacked p;
  const KvBlockShape shape = kv_block_shape(*t.layout);
  p.shape = kv_shape_fingerprint(shape);
  p.image_bytes = kv_block_image_bytes(shape);
  const size_t per_block = sizeof(uint64_t) + p.image_bytes;
  const uint32_t per_part = uint32_t(std::min<size_t>(kKvPushMaxBlocks, std::max<size_t>(1, message_bytes / per_block)));
  p.data = buffers.get(size_t(t.n_blocks) * per_block);
  for (uint32_t first = 0; first < t.n_blocks; first += per_part) {
    const KvPacked::Part part{size_t(first) * per_block, std::min(per_part, t.n_blocks - first)};
    char* keys = p.data->data() + part.offset;
    std::memcpy(keys, t.keys + first, size_t(part.n_blocks) * sizeof(uint64_t));
    char* images = keys + size_t(part.n_blocks) * sizeof(uint64_t);
    for (uint32_t i = 0; i < part.n_blocks; ++i) save_kv_block(*t.layout, t.blocks[first + i], images + size_t(i) * p.image_bytes);
    p.parts.push_back(part);
  }
  return p;
}

// Block images in memory under (namespace, key), at most max_bytes of them, least recently used dropped
// first; loads written into the pool by a thread of its own, one at a time in arrival order, each
// reported through `done` (cancel() through `cancelled` is checked between blocks). Thread-safe.
class KvMemoryTier {
 public:
  KvMemoryTier(std::string plugin_id, uint64_t max_bytes, KvCompletions& done, KvCancellations& cancelled)
      : id_(std::move(plugin_id)), max_bytes_(max_bytes), done_(done), cancelled_(cancelled) {
    thread_ = std::thread([this] { run_loads(); });
  }
  // A load being written ends first (the host frees its blocks after destroy()); queued ones are dropped.
  ~KvMemoryTier() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  KvMemoryTier(const KvMemoryTier&) = delete;
  KvMemoryTier& operator=(const KvMemoryTier&) = delete;

  KvBuffers& buffers() { return *buffers_; }

  // th_kv_connector_vtable.contains.
  uint32_t contains(uint64_t ns, const uint64_t* keys, uint32_t n) {
    std::lock_guard lock(mutex_);
    uint32_t i = 0;
    while (i < n && store_.contains(KvBlockId{ns, keys[i]})) ++i;
    return i;
  }

  // Adds n blocks at offset of a buffer (n keys, then n images of image_bytes of the shape) to the tier;
  // the blocks share the buffer, which goes with the last of them.
  void store(uint64_t ns, uint64_t shape, size_t image_bytes, uint32_t n, const std::shared_ptr<const KvBuffer>& buffer, size_t offset = 0) {
    const char* keys = buffer->data() + offset;
    const char* images = keys + size_t(n) * sizeof(uint64_t);
    std::lock_guard lock(mutex_);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t key = 0;
      std::memcpy(&key, keys + size_t(i) * sizeof key, sizeof key);
      store_.add(KvBlockId{ns, key}, image_bytes, Stored{shape, image_bytes, buffer, images + size_t(i) * image_bytes});
    }
    evicted_ += store_.evict_over(max_bytes_).size();
  }
  // Every part of a packed save, into the tier.
  void store(uint64_t ns, const KvPacked& p) {
    for (const KvPacked::Part& part : p.parts) store(ns, p.shape, p.image_bytes, part.n_blocks, p.data, part.offset);
  }

  // Counts n blocks refused on arrival (a damaged message).
  void refused(uint64_t n) {
    std::lock_guard lock(mutex_);
    refused_ += n;
  }

  // th_kv_connector_vtable.load: queued for the loads thread. t was checked (check_kv_transfer).
  void load(const th_kv_transfer& t) {
    Load job;
    job.ticket = t.ticket;
    job.ns = t.namespace_id;
    job.layout = *t.layout;  // its memory stays where it is while the engine runs (th_kvcache.h)
    job.keys.assign(t.keys, t.keys + t.n_blocks);
    job.blocks.assign(t.blocks, t.blocks + t.n_blocks);
    std::lock_guard lock(mutex_);
    loads_.push_back(std::move(job));
    wake_.notify_one();
  }

  // stored, capacity, evicted and refused counts into s.
  void count(th_kv_connector_stats& s) {
    std::lock_guard lock(mutex_);
    s.stored_blocks = store_.size();
    s.stored_bytes = store_.bytes();
    s.capacity_bytes = max_bytes_;
    s.evicted_blocks = evicted_;
    s.refused_blocks = refused_;
  }

 private:
  struct Stored {
    uint64_t shape = 0;
    size_t bytes = 0;
    std::shared_ptr<const KvBuffer> buffer;
    const char* image = nullptr;  // inside *buffer
  };
  struct Load {
    uint64_t ticket = 0, ns = 0;
    th_kv_layout layout{};
    std::vector<uint64_t> keys;
    std::vector<int32_t> blocks;
  };

  void run_loads() {
    for (;;) {
      Load job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !loads_.empty(); });
        if (stopping_) return;  // queued loads are dropped: a load not started wrote nothing
        job = std::move(loads_.front());
        loads_.pop_front();
      }
      const KvBlockShape shape = kv_block_shape(job.layout);
      const uint64_t fingerprint = kv_shape_fingerprint(shape);
      const size_t bytes = kv_block_image_bytes(shape);
      th_status status = TH_OK;
      std::string message;
      uint32_t k = 0;
      for (; k < job.keys.size(); ++k) {
        Stored block;
        {
          std::lock_guard lock(mutex_);
          if (cancelled_.cancelled(job.ticket)) {
            status = TH_ERR_NOT_FOUND;
            message = id_ + ": load cancelled";
            break;
          }
          const KvBlockId id{job.ns, job.keys[k]};
          if (const Stored* s = store_.find(id)) block = *s;
          if (block.image != nullptr && (block.shape != fingerprint || block.bytes != bytes)) {
            store_.erase(id);
            ++refused_;
            status = TH_ERR_NOT_FOUND;
            message = id_ + ": refused block " + std::to_string(job.keys[k]) + ": it holds another KV shape";
            break;
          }
          if (block.image == nullptr) {
            status = TH_ERR_NOT_FOUND;
            message = id_ + ": block " + std::to_string(job.keys[k]) + " is no longer held";
            break;
          }
          store_.touch(id);
        }
        load_kv_block(job.layout, job.blocks[k], block.image);  // block.buffer keeps it alive through the copy
      }
      cancelled_.forget(job.ticket);
      done_.push(job.ticket, status, k, std::move(message));
    }
  }

  std::string id_;
  uint64_t max_bytes_;
  KvCompletions& done_;
  KvCancellations& cancelled_;
  std::shared_ptr<KvBuffers> buffers_ = std::make_shared<KvBuffers>();
  std::mutex mutex_;  // everything below
  std::condition_variable wake_;
  KvLru<Stored> store_;
  std::deque<Load> loads_;
  uint64_t evicted_ = 0, refused_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

// Saves sent to peers (numbered 0..n-1 by the connector) and waiting for their ACKs: a save completes
// TH_OK once every peer acknowledged all its blocks, or fails with the first peer's failure once every
// peer answered or failed; a peer silent past the deadline fails. Not thread-safe: one thread's.
class KvSavesInFlight {
 public:
  using Clock = std::chrono::steady_clock;
  KvSavesInFlight(std::string plugin_id, KvCompletions& done) : id_(std::move(plugin_id)), done_(done) {}

  // A save of n_blocks for ticket, to be sent now: its message id (for every BLOCKS header of it).
  uint64_t start(uint64_t ticket, uint32_t n_blocks, Clock::duration timeout) {
    const uint64_t message = ++next_message_;
    Save& s = saves_[message];
    s.ticket = ticket;
    s.n_blocks = n_blocks;
    s.deadline = Clock::now() + timeout;
    return message;
  }
  // The save's blocks are on their way to peer: it is waited for.
  void sent(uint64_t message, uint32_t peer) {
    if (auto it = saves_.find(message); it != saves_.end()) it->second.waiting[peer] = it->second.n_blocks;
  }
  // Peer will not store the save (why names it); finish() reports the save when nobody is left.
  void fail(uint64_t message, uint32_t peer, const std::string& why) {
    auto it = saves_.find(message);
    if (it == saves_.end()) return;
    it->second.waiting.erase(peer);
    if (it->second.failure.empty()) it->second.failure = id_ + ": " + why;
  }
  // Peer failed (its connection went): every save waiting for it fails.
  void fail_peer(uint32_t peer, const std::string& why) {
    for (auto& [message, s] : saves_)
      if (s.waiting.count(peer)) fail(message, peer, why);
  }
  // An ACK came; peer_name names the peer in a failure. False when it answers no save of ours (late,
  // or not for us).
  bool ack(const KvAckHeader& a, const std::string& peer_name) {
    if (a.magic != kKvPushMagic || a.version != kKvPushVersion) return false;
    auto it = saves_.find(a.message);
    if (it == saves_.end() || !it->second.waiting.count(a.peer)) return false;
    uint32_t& left = it->second.waiting[a.peer];
    if (a.status != TH_OK || a.stored == 0 || a.stored > left) fail(a.message, a.peer, "peer " + peer_name + " refused the blocks");
    else if ((left -= a.stored) == 0) it->second.waiting.erase(a.peer);
    finish(a.message);
    return true;
  }
  // Reports the save once nobody is waited for.
  void finish(uint64_t message) {
    auto it = saves_.find(message);
    if (it == saves_.end() || !it->second.waiting.empty()) return;
    const Save& s = it->second;
    if (s.failure.empty()) done_.push(s.ticket, TH_OK, s.n_blocks);
    else done_.push(s.ticket, TH_ERR_INTERNAL, 0, s.failure);
    saves_.erase(it);
  }
  // Reports every save nobody is waited for (after fail_peer()).
  void finish_answered() {
    std::vector<uint64_t> answered;
    for (const auto& [message, s] : saves_)
      if (s.waiting.empty()) answered.push_back(message);
    for (uint64_t m : answered) finish(m);
  }
  // Fails the saves past their deadline, naming the silent peers (peer_name(i)) and the timeout.
  void expire(const std::function<std::string(uint32_t)>& peer_name, Clock::duration timeout) {
    const auto now = Clock::now();
    std::vector<uint64_t> late;
    for (const auto& [message, s] : saves_)
      if (now >= s.deadline) late.push_back(message);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    for (uint64_t message : late) {
      Save& s = saves_[message];
      std::string names;
      std::vector<uint32_t> waiting;
      for (const auto& [peer, left] : s.waiting) {
        names += (names.empty() ? "" : ", ") + peer_name(peer);
        waiting.push_back(peer);
      }
      for (uint32_t peer : waiting) fail(message, peer, "no answer from peer " + names + " within " + std::to_string(ms) + " ms");
      finish(message);
    }
  }
  bool empty() const { return saves_.empty(); }

 private:
  struct Save {
    uint64_t ticket = 0;
    uint32_t n_blocks = 0;
    std::map<uint32_t, uint32_t> waiting;  // peers not yet done: blocks they have not acknowledged
    std::string failure;                   // the first peer's failure
    Clock::time_point deadline;
  };
  std::string id_;
  KvCompletions& done_;
  std::map<uint64_t, Save> saves_;
  uint64_t next_message_ = 0;
};

// The part of a push connector's instance that is not its transport: a base class whose members
// kv_connector_vtable<C> finds (C may hide poll() to do more first). The class C adds save() around
// pack_or_keep() and sends what it returns; it delivers received blocks with tier().store() and
// answers them.
class KvPushConnector {
 public:
  KvPushConnector(const char* plugin_id, uint64_t max_bytes) : id_(plugin_id), tier_(plugin_id, max_bytes, done_, cancelled_) {}
  uint32_t contains(uint64_t ns, const uint64_t* keys, uint32_t n) { return tier_.contains(ns, keys, n); }
  void load(const th_kv_transfer& t) {
    check_kv_transfer(t, id_.c_str(), "load");
    tier_.load(t);
  }
  void poll(th_kv_completion* out, uint32_t capacity, uint32_t* n_out) { done_.poll(out, capacity, n_out); }
  void cancel(uint64_t ticket) { cancelled_.cancel(ticket); }
  void stats(th_kv_connector_stats* out) {
    th_kv_connector_stats s{};
    tier_.count(s);
    write_kv_connector_stats(s, out);
  }

 protected:
  // save()'s start: checks t and reads its blocks. Returns false when the save is over already (no
  // blocks; or no peers to send to, its blocks then kept in this instance's tier), completed; else
  // the blocks in parts of at most message_bytes, for the caller to send.
  bool pack_or_keep(const th_kv_transfer& t, bool has_peers, size_t message_bytes, KvPacked& packed) {
    check_kv_transfer(t, id_.c_str(), "save");
    if (t.n_blocks == 0) {
      done_.push(t.ticket, TH_OK, 0);
      return false;
    }
    packed = pack_kv_save(t, tier_.buffers(), message_bytes);
    if (has_peers) return true;
    tier_.store(t.namespace_id, packed);
    done_.push(t.ticket, TH_OK, t.n_blocks);
    return false;
  }
  KvMemoryTier& tier() { return tier_; }
  KvCompletions& done() { return done_; }

 private:
  std::string id_;
  KvCompletions done_;
  KvCancellations cancelled_;
  KvMemoryTier tier_;  // after done_ and cancelled_, which its loads thread uses: it ends first
};

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_KV_PUSH_HPP
