// One plugin instance: made by the library's create(), owned by exactly one actor, destroyed by its
// destructor. It holds its library (shared), so a library stays open while any instance of it lives.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tokenhost/tokenhost.h>
#include <toml++/toml.h>

#include "base/compute_pool.hpp"
#include "base/devices.hpp"
#include "base/model_spec.hpp"
#include "plugin/abi_member.hpp"
#include "plugin/crash_attribution.hpp"
#include "plugin/plugin_fault.hpp"
#include "plugin/host_api.hpp"
#include "plugin/kind.hpp"
#include "plugin/library.hpp"
#include "plugin/vocab.hpp"

namespace tokenhost {


// Where and how an instance is made.
struct InstanceSpec {
  std::string engine;
  std::string slot;          // the slot's name (SlotId::name()): the instance's metric and crash label
  ModelSpec model;
  DeviceInfo device;
  toml::table config;        // defaults merged with settings (merge_plugin_config)
  metrics::Registry* metrics = nullptr;
  // Draft sessions the instance may open (th_host_api.draft_*): an engine's spec_decode slot only.
  std::shared_ptr<DraftSessionHost> drafts;
  // The engine's compute partition (th_host_api.parallel_for and compute_threads use it); NULL: the
  // process-wide pool. device.threads is its thread count then.
  std::shared_ptr<ComputePool> pool;
  // Where the instance's th_host_api.peer_send messages go: an engine's kv_connector layers only.
  std::shared_ptr<PeerPost> peers;
  // The model's vocabulary (th_create_args.vocab); NULL for a model without one.
  std::shared_ptr<const PluginVocab> vocab;
};

// Reasons the plugin of lib says it cannot serve spec (empty: it can). Throws nothing.
std::vector<std::string> check_plugin(const PluginLibrary& lib, const InstanceSpec& spec);

class PluginInstance {
 public:
  // Runs check() then create(). Throws PluginError naming the plugin and its reasons.
  static std::shared_ptr<PluginInstance> create(std::shared_ptr<PluginLibrary> lib, const InstanceSpec& spec);
  ~PluginInstance();
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  // Member `member` of the plugin's vtable, or NULL when the plugin's vtable ends before it (built
  // against a minor that had no such member). Every host call of a plugin goes through it. Members of
  // ABI 1.0 that the loader requires are never NULL here; members appended later are optional.
  template <class VT, class M>
  M fn(M VT::*member) const { return abi_member(vtable<VT>(), member); }
  // Calls vtable member `member` with args, the thread marked as inside this plugin's call `name` (a
  // crash in it is attributed: crash_attribution.hpp). Whatever the call throws comes out as
  // PluginFault, logged (plugin_fault.hpp). The member must be present: a required one, or an
  // optional one fn() returned non-NULL for.
  template <class VT, class M, class... A>
  auto call(M VT::*member, const char* name, A&&... args) const {
    const PluginCallSite site = call_site(name);
    return guarded_plugin_call(site, [&] { return fn(member)(std::forward<A>(args)...); });
  }
  // The vtable as the plugin filled it: its members past struct_size are not the plugin's. Host code
  // calls members through fn(); tests of the current ABI's plugins may read it directly.
  template <class VT>
  const VT& vtable() const { return *static_cast<const VT*>(lib_->vtable()); }
  th_instance* handle() const { return instance_; }
  th_host_ctx* ctx() const { return ctx_.get(); }
  const PluginLibrary& library() const { return *lib_; }
  const std::string& id() const { return lib_->id(); }
  const std::string& version() const { return lib_->version(); }
  const toml::table& config() const { return config_.table; }
  // This instance inside its call `name`, for a crash report or a PluginFault (the strings are the
  // instance's: valid while it lives).
  PluginCallSite call_site(const char* name) const {
    return {id().c_str(), version().c_str(), ctx_->slot.c_str(), ctx_->engine.c_str(), name};
  }
  // The device it was created for (InstanceSpec::device).
  const DeviceInfo& device() const { return device_; }
  // The vocabulary it was given (InstanceSpec::vocab), or NULL.
  const PluginVocab* vocab() const { return vocab_.get(); }

 private:
  PluginInstance() = default;
  std::shared_ptr<PluginLibrary> lib_;  // declared first: destroyed last
  std::unique_ptr<th_host_ctx> ctx_;
  th_config config_;
  DeviceInfo device_;
  std::shared_ptr<const PluginVocab> vocab_;  // kept while the instance lives (th_create_args.vocab)
  th_vocab vocab_abi_{};
  th_instance* instance_ = nullptr;
};

// The plugin instances an actor holds, by slot (plugin/kind.hpp): one per slot, or an ordered list for a
// slot that stacks (SlotInfo::stacks); an empty slot holds none.
class SlotInstances {
 public:
  SlotInstances() : by_slot_(all_slots().size()) {}
  // The slot's instance (a stack's first); NULL when the slot is empty.
  PluginInstance* get(SlotId slot) const {
    const auto& v = by_slot_.at(slot.index());
    return v.empty() ? nullptr : v.front().get();
  }
  // What the slot holds, in order (at most one for a slot that does not stack).
  const std::vector<std::shared_ptr<PluginInstance>>& stack(SlotId slot) const { return by_slot_.at(slot.index()); }
  std::vector<std::shared_ptr<PluginInstance>>& stack(SlotId slot) { return by_slot_.at(slot.index()); }
  // The slot holds `instance` alone from now on (NULL: nothing). What it held is released here.
  void set(SlotId slot, std::shared_ptr<PluginInstance> instance) {
    auto& v = by_slot_.at(slot.index());
    v.clear();
    if (instance) v.push_back(std::move(instance));
  }

 private:
  std::vector<std::vector<std::shared_ptr<PluginInstance>>> by_slot_;
};

// The layout a kvcache instance publishes (th_kvcache_vtable.get_layout), or NULL when its call fails or
// gives none. What the layout's members hold is for the caller to check.
inline const th_kv_layout* kv_layout(const PluginInstance& kvcache) {
  const th_kv_layout* layout = nullptr;
  th_error err;
  if (kvcache.call(&th_kvcache_vtable::get_layout, "get_layout", kvcache.handle(), &layout, &err) != TH_OK) return nullptr;
  return layout;
}

// Whether a kvcache instance caches prefixes: it has seq_lookup, seq_publish and cache_flush (ABI 1.5,
// th_kvcache.h), which the loader accepts all three or none.
inline bool caches_prefixes(const PluginInstance& kvcache) {
  return kvcache.fn(&th_kvcache_vtable::seq_lookup) != nullptr && kvcache.fn(&th_kvcache_vtable::seq_publish) != nullptr &&
         kvcache.fn(&th_kvcache_vtable::cache_flush) != nullptr;
}

}  // namespace tokenhost
