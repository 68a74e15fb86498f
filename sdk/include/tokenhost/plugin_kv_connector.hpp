// tokenhost plugin SDK: the parts every KV connector (th_kv_connector.h) writes the same way (C++17).
//
// Like plugin_kv_blocks.hpp it adds no ABI. What:
//   - sdk::check_kv_transfer(): a transfer's layout, keys and block indices checked before anything is
//     read or written (the host validates too; a connector trusts nothing it is handed);
//   - sdk::KvCompletions: finished transfers queued from any thread and handed out by poll(), with
//     the messages kept until the next poll as th_kv_completion.message promises;
//   - sdk::KvCancellations: the tickets cancel() named, for the thread that moves the blocks to check;
//   - sdk::KvBlockId, sdk::KvLru<V>: an index of blocks by (namespace, key) under a byte cap, least
//     recently used first, whose evictions come back to the caller (a file to remove, memory to free);
//   - sdk::write_kv_connector_stats(): stats() within both sides' struct_size;
//   - sdk::check_host_memory_device(): check()'s refusal of an engine whose KV is not in host memory;
//   - sdk::kv_connector_vtable<C>(check): the th_kv_connector_vtable of a plugin whose instances are
//     a class C with contains(ns, keys, n) -> n_leading, save(t), load(t), poll(out, capacity, n_out),
//     cancel(ticket) and stats(out); its arguments checked for NULL and its exceptions turned into
//     statuses (guard()). A C that also has receive(from, bytes, n) takes messages (the vtable's
//     optional receive; what it throws is logged, not thrown across the boundary).
#ifndef TOKENHOST_PLUGIN_KV_CONNECTOR_HPP
#define TOKENHOST_PLUGIN_KV_CONNECTOR_HPP

#include <tokenhost/plugin.hpp>
#include <tokenhost/th_kv_connector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tokenhost::sdk {

// Throws Error naming the plugin and what is wrong: no layout, keys or blocks; a pool outside host
// memory; a block index outside the pool.
inline void check_kv_transfer(const th_kv_transfer& t, const char* plugin_id, const char* what) {
  const std::string who = std::string(plugin_id) + ": " + what;
  if (t.layout == nullptr || (t.n_blocks > 0 && (t.keys == nullptr || t.blocks == nullptr)))
    throw Error(TH_ERR_INVALID_ARGUMENT, who + " of a transfer without layout, keys or blocks");
  if (t.layout->device != TH_DEVICE_CPU) throw Error(TH_ERR_UNSUPPORTED, who + " of blocks outside host memory");
  for (uint32_t i = 0; i < t.n_blocks; ++i)
    if (t.blocks[i] < 0 || uint32_t(t.blocks[i]) >= t.layout->n_blocks)
      throw Error(TH_ERR_INVALID_ARGUMENT, who + " of block " + std::to_string(t.blocks[i]) + ", outside the pool of " +
                                                std::to_string(t.layout->n_blocks));
}

// Finished transfers, pushed by the connector's threads and reported once each by poll().
class KvCompletions {
 public:
  void push(uint64_t ticket, th_status status, uint32_t n_done, std::string message = {}) {
    std::lock_guard lock(mutex_);
    done_.push_back(Done{ticket, status, n_done, std::move(message)});
  }
  // th_kv_connector_vtable.poll: the messages stay valid until the next call.
  void poll(th_kv_completion* out, uint32_t capacity, uint32_t* n_out) {
    std::lock_guard lock(mutex_);
    messages_.clear();
    messages_.reserve(std::min<size_t>(capacity, done_.size()));  // no reallocation: c_str() pointers hold
    uint32_t n = 0;
    while (n < capacity && !done_.empty()) {
      Done& d = done_.front();
      messages_.push_back(std::move(d.message));
      out[n++] = th_kv_completion{d.ticket, d.status, d.n_done, d.status == TH_OK ? nullptr : messages_.back().c_str()};
      done_.pop_front();
    }
    *n_out = n;
  }

 private:
  struct Done {
    uint64_t ticket;
    th_status status;
    uint32_t n_done;
    std::string message;
  };
  std::mutex mutex_;
  std::deque<Done> done_;
  std::vector<std::string> messages_;
};

// Tickets given up (th_kv_connector_vtable.cancel), checked by the thread doing the transfer between
// blocks and forgotten once the transfer completed. Thread-safe.
class KvCancellations {
 public:
  void cancel(uint64_t ticket) {
    std::lock_guard lock(mutex_);
    tickets_.insert(ticket);
  }
  bool cancelled(uint64_t ticket) const {
    std::lock_guard lock(mutex_);
    return tickets_.count(ticket) != 0;
  }
  void forget(uint64_t ticket) {
    std::lock_guard lock(mutex_);
    tickets_.erase(ticket);
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<uint64_t> tickets_;
};

struct KvBlockId {
  uint64_t ns = 0, key = 0;
  bool operator==(const KvBlockId& o) const { return ns == o.ns && key == o.key; }
};
struct KvBlockIdHash {
  size_t operator()(const KvBlockId& id) const { return size_t(id.ns * 0x9e3779b97f4a7c15ull ^ id.key); }
};

// Blocks by id, each with its size in bytes and a value (V: what the caller needs to find or free the
// block), least recently used first. Not thread-safe: the caller holds its own lock.
template <class V>
class KvLru {
 public:
  bool contains(const KvBlockId& id) const { return index_.count(id) != 0; }
  const V* find(const KvBlockId& id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &it->second.value;
  }
  size_t size() const { return index_.size(); }
  uint64_t bytes() const { return bytes_; }

  // Adds id as the most recently used (replacing an entry of the same id).
  void add(const KvBlockId& id, uint64_t bytes, V value) {
    erase(id);
    lru_.push_back(id);
    index_.emplace(id, Entry{bytes, std::prev(lru_.end()), std::move(value)});
    bytes_ += bytes;
  }
  // Removes id; false when it was not there.
  bool erase(const KvBlockId& id, V* value = nullptr) {
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    if (value != nullptr) *value = std::move(it->second.value);
    index_.erase(it);
    return true;
  }
  void touch(const KvBlockId& id) {
    auto it = index_.find(id);
    if (it != index_.end()) lru_.splice(lru_.end(), lru_, it->second.lru);
  }
  // Removes the least recently used entries until bytes() <= max_bytes; returns them.
  std::vector<std::pair<KvBlockId, V>> evict_over(uint64_t max_bytes) {
    std::vector<std::pair<KvBlockId, V>> out;
    while (bytes_ > max_bytes && !lru_.empty()) {
      const KvBlockId victim = lru_.front();  // a copy: erase() drops the list's element
      V value{};
      erase(victim, &value);
      out.emplace_back(victim, std::move(value));
    }
    return out;
  }

 private:
  struct Entry {
    uint64_t bytes = 0;
    typename std::list<KvBlockId>::iterator lru;
    V value;
  };
  std::unordered_map<KvBlockId, Entry, KvBlockIdHash> index_;
  std::list<KvBlockId> lru_;  // least recently used first
  uint64_t bytes_ = 0;
};

// th_kv_connector_vtable.stats: writes s into out, no further than out->struct_size and this
// header's size, and sets out->struct_size to what was written.
inline void write_kv_connector_stats(th_kv_connector_stats s, th_kv_connector_stats* out) {
  const uint32_t size = std::min<uint32_t>(out->struct_size, sizeof s);
  s.struct_size = size;
  std::memcpy(out, &s, size);
}

// For check(): throws Error naming the plugin unless the engine's device is the CPU (its KV in host
// memory, where save_kv_block and load_kv_block reach it).
inline void check_host_memory_device(const th_check_query* query, const char* plugin_id) {
  if (query == nullptr || query->device == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(plugin_id) + ": check() needs a device");
  if (query->device->kind != TH_DEVICE_CPU)
    throw Error(TH_ERR_UNSUPPORTED, std::string(plugin_id) + " moves blocks of host memory; the engine's device is not the CPU");
}

// The vtable members of kv_connector_vtable.
template <class C>
struct KvConnectorMembers {
  static th_status contains(th_instance* i, uint64_t ns, const uint64_t* keys, uint32_t n, uint32_t* n_leading, th_error* err) {
    return guard(err, [&] {
      if (n_leading == nullptr || (n > 0 && keys == nullptr)) throw Error(TH_ERR_INVALID_ARGUMENT, "contains() got a NULL argument");
      *n_leading = self<C>(i).contains(ns, keys, n);
    });
  }
  static th_status save(th_instance* i, const th_kv_transfer* t, th_error* err) {
    return guard(err, [&] {
      if (t == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "save() got no transfer");
      self<C>(i).save(*t);
    });
  }
  static th_status load(th_instance* i, const th_kv_transfer* t, th_error* err) {
    return guard(err, [&] {
      if (t == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "load() got no transfer");
      self<C>(i).load(*t);
    });
  }
  static void poll(th_instance* i, th_kv_completion* out, uint32_t capacity, uint32_t* n_out) {
    if (n_out == nullptr) return;
    *n_out = 0;
    if (out != nullptr) self<C>(i).poll(out, capacity, n_out);
  }
  static void cancel(th_instance* i, uint64_t ticket) { self<C>(i).cancel(ticket); }
  static void stats(th_instance* i, th_kv_connector_stats* out) {
    if (out != nullptr) self<C>(i).stats(out);
  }
  static void receive(th_instance* i, const char* from, const void* bytes, size_t n) {
    if (from == nullptr || (n > 0 && bytes == nullptr)) return;
    try {
      self<C>(i).receive(from, static_cast<const char*>(bytes), n);
    } catch (const std::exception& e) {
      log(nullptr, TH_LOG_WARN, std::string("a KV connector dropped a message from ") + from + ": " + e.what());
    } catch (...) {
      log(nullptr, TH_LOG_WARN, std::string("a KV connector dropped a message from ") + from + ": unknown exception");
    }
  }
};

// Whether C takes messages from its instances on other engines: has receive(from, bytes, n).
template <class C, class = void>
struct KvTakesMessages : std::false_type {};
template <class C>
struct KvTakesMessages<C, std::void_t<decltype(std::declval<C&>().receive("", static_cast<const char*>(nullptr), size_t(0)))>>
    : std::true_type {};

template <class C>
th_kv_connector_vtable kv_connector_vtable(th_status (*check)(const th_check_query*, th_error*)) {
  using M = KvConnectorMembers<C>;
  th_kv_connector_vtable vt{};
  vt.struct_size = sizeof vt;
  vt.create = create_instance<C>;
  vt.destroy = destroy_instance<C>;
  vt.check = check;
  vt.contains = M::contains;
  vt.save = M::save;
  vt.load = M::load;
  vt.poll = M::poll;
  vt.cancel = M::cancel;
  vt.stats = M::stats;
  if constexpr (KvTakesMessages<C>::value) vt.receive = M::receive;
  return vt;
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_KV_CONNECTOR_HPP
