#include "plugin/kind.hpp"

#include <cstddef>
#include <stdexcept>

namespace tokenhost {
namespace {

// The vtable's size in each minor of this ABI major: a plugin that declares minor m must fill at least
// vtable_size[m] bytes (th_common.h, GROWTH). When a minor appends a vtable member, its column holds
// TH_SIZE_THROUGH(vtable, new_member); a minor that appends none repeats the previous size. The last
// column is the size of the host's own headers (checked below).
constexpr size_t kMinors = TH_ABI_VERSION_MINOR + 1;

struct KindInfo {
  SlotInfo slot;
  size_t vtable_size[kMinors];  // by minor: 1.0, 1.1, ..., 1.11; 0 for minors before the kind existed
};

constexpr size_t kAttention = TH_SIZE_THROUGH(th_attention_vtable, forward);
constexpr size_t kKvcache = TH_SIZE_THROUGH(th_kvcache_vtable, stats);
constexpr size_t kKvcache14 = TH_SIZE_THROUGH(th_kvcache_vtable, seq_truncate);
constexpr size_t kKvcache15 = TH_SIZE_THROUGH(th_kvcache_vtable, cache_flush);
constexpr size_t kKvcache16 = TH_SIZE_THROUGH(th_kvcache_vtable, seq_drop_blocks);
constexpr size_t kMoe = TH_SIZE_THROUGH(th_moe_vtable, rebalance);
constexpr size_t kSpecDecode = TH_SIZE_THROUGH(th_spec_decode_vtable, seq_end);
constexpr size_t kScheduler = TH_SIZE_THROUGH(th_scheduler_vtable, schedule);
constexpr size_t kRouter = TH_SIZE_THROUGH(th_router_vtable, feedback);
constexpr size_t kRouter17 = TH_SIZE_THROUGH(th_router_vtable, select);
constexpr size_t kKvConnector = TH_SIZE_THROUGH(th_kv_connector_vtable, receive);  // receive: optional (NULL)
constexpr size_t kConstraint = TH_SIZE_THROUGH(th_constraint_vtable, masks);

using enum SlotNeed;
using enum SlotOwner;
using enum SwapMode;

// The slot table (kind.hpp): one row per kind.
//  kind, name, header, need, owner, swap, unloadable, default plugin; vtable sizes by minor
constexpr KindInfo kKinds[] = {
    {{TH_KIND_ATTENTION, "attention", "th_attention.h", always, worker, live, false, ""},
     {kAttention, kAttention, kAttention, kAttention, kAttention, kAttention, kAttention, kAttention, kAttention, kAttention, kAttention, kAttention}},
    {{TH_KIND_KVCACHE, "kvcache", "th_kvcache.h", always, worker, new_engine, false, ""}, {kKvcache, kKvcache, kKvcache, kKvcache, kKvcache14, kKvcache15, kKvcache16, kKvcache16, kKvcache16, kKvcache16, kKvcache16, kKvcache16}},
    {{TH_KIND_SCHEDULER, "scheduler", "th_scheduler.h", always, engine, live, false, ""},
     {kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler, kScheduler}},
    {{TH_KIND_MOE, "moe", "th_moe.h", moe_models, worker, live, false, ""}, {kMoe, kMoe, kMoe, kMoe, kMoe, kMoe, kMoe, kMoe, kMoe, kMoe, kMoe, kMoe}},
    {{TH_KIND_SPEC_DECODE, "spec_decode", "th_spec_decode.h", optional, engine, live, true, ""},
     {kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode, kSpecDecode}},
    {{TH_KIND_ROUTER, "router", "th_router.h", always, router, live, false, "router.round_robin"},
     {kRouter, kRouter, kRouter, kRouter, kRouter, kRouter, kRouter, kRouter17, kRouter17, kRouter17, kRouter17, kRouter17}},
    // ABI 1.9: an ordered stack of connectors per engine (SlotInfo::stacks), none by default.
    {{TH_KIND_KV_CONNECTOR, "kv_connector", "th_kv_connector.h", optional, worker, live, true, "", true},
     {0, 0, 0, 0, 0, 0, 0, 0, 0, kKvConnector, kKvConnector, kKvConnector}},
    // ABI 1.11: structured output; the host fills it with constraint.gbnf where an engine of a model
    // with a vocabulary names none.
    {{TH_KIND_CONSTRAINT, "constraint", "th_constraint.h", optional, worker, live, true, "constraint.gbnf"},
     {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, kConstraint}},
};

constexpr size_t headers_vtable_size(th_kind kind) {
  switch (kind) {
    case TH_KIND_ATTENTION: return sizeof(th_attention_vtable);
    case TH_KIND_KVCACHE: return sizeof(th_kvcache_vtable);
    case TH_KIND_MOE: return sizeof(th_moe_vtable);
    case TH_KIND_SPEC_DECODE: return sizeof(th_spec_decode_vtable);
    case TH_KIND_SCHEDULER: return sizeof(th_scheduler_vtable);
    case TH_KIND_ROUTER: return sizeof(th_router_vtable);
    case TH_KIND_KV_CONNECTOR: return sizeof(th_kv_connector_vtable);
    case TH_KIND_CONSTRAINT: return sizeof(th_constraint_vtable);
    default: return 0;
  }
}

// A minor that appended a member without a new column (or a column not updated) fails here.
constexpr bool current_sizes_match() {
  for (size_t k = 0; k < sizeof(kKinds) / sizeof(kKinds[0]); ++k) {
    if (kKinds[k].vtable_size[kMinors - 1] != headers_vtable_size(kKinds[k].slot.kind)) return false;
    for (size_t m = 1; m < kMinors; ++m)
      if (kKinds[k].vtable_size[m] < kKinds[k].vtable_size[m - 1]) return false;
  }
  return true;
}
static_assert(current_sizes_match(), "a vtable grew: record its size for the new minor in kKinds");

// Records the name of each required member that is NULL.
template <class VT>
struct Required {
  const VT& vt;
  std::vector<std::string>& missing;
  template <class M>
  Required& operator()(M VT::*member, const char* name) {
    if (vt.*member == nullptr) missing.emplace_back(name);
    return *this;
  }
};

template <class VT>
Required<VT> required(const void* vtable, std::vector<std::string>& missing) {
  const VT& vt = *static_cast<const VT*>(vtable);
  Required<VT> r{vt, missing};
  r(&VT::create, "create")(&VT::destroy, "destroy")(&VT::check, "check");
  return r;
}

}  // namespace

std::string kind_name(th_kind kind) {
  for (const auto& k : kKinds)
    if (k.slot.kind == kind) return k.slot.name;
  return "unknown(" + std::to_string(kind) + ")";
}

std::optional<th_kind> kind_from_name(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.slot.name) return k.slot.kind;
  return std::nullopt;
}

const std::vector<std::string>& kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& k : kKinds) v.emplace_back(k.slot.name);
    return v;
  }();
  return names;
}

size_t vtable_size(th_kind kind, uint16_t minor) {
  if (minor >= kMinors) minor = kMinors - 1;
  for (const auto& k : kKinds)
    if (k.slot.kind == kind) return k.vtable_size[minor];
  return 0;
}

const std::vector<SlotInfo>& slot_table() {
  static const std::vector<SlotInfo> table = [] {
    std::vector<SlotInfo> v;
    for (const auto& k : kKinds) v.push_back(k.slot);
    return v;
  }();
  return table;
}

const SlotInfo* find_slot(const std::string& name) {
  for (const auto& s : slot_table())
    if (name == s.name) return &s;
  return nullptr;
}

const std::vector<std::string>& engine_slot_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& s : slot_table())
      if (s.owner != SlotOwner::router) v.emplace_back(s.name);
    return v;
  }();
  return names;
}

const SlotInfo& SlotId::info() const { return slot_table().at(index_); }

const std::vector<SlotId>& all_slots() {
  static const std::vector<SlotId> ids = [] {
    std::vector<SlotId> v;
    for (size_t i = 0; i < slot_table().size(); ++i) v.push_back(SlotId(uint8_t(i)));
    return v;
  }();
  return ids;
}

SlotId slot_of(th_kind kind) {
  for (SlotId id : all_slots())
    if (id.kind() == kind) return id;
  throw std::logic_error("no slot for plugin kind " + std::to_string(kind));
}

std::optional<SlotId> slot_named(const std::string& name) {
  for (SlotId id : all_slots())
    if (name == id.name()) return id;
  return std::nullopt;
}

std::vector<SlotId> slots_owned_by(SlotOwner owner) {
  std::vector<SlotId> out;
  for (SlotId id : all_slots())
    if (id.info().owner == owner) out.push_back(id);
  return out;
}

bool slot_required(const SlotInfo& slot, uint32_t n_experts) {
  return slot.need == SlotNeed::always || (slot.need == SlotNeed::moe_models && n_experts > 0);
}

std::vector<std::string> missing_vtable_members(th_kind kind, const void* vtable) {
  std::vector<std::string> missing;
  switch (kind) {
    case TH_KIND_ATTENTION:
      required<th_attention_vtable>(vtable, missing)(&th_attention_vtable::forward, "forward");
      break;
    case TH_KIND_KVCACHE:
      required<th_kvcache_vtable>(vtable, missing)(&th_kvcache_vtable::get_layout, "get_layout")(
          &th_kvcache_vtable::seq_reserve, "seq_reserve")(&th_kvcache_vtable::seq_free, "seq_free")(
          &th_kvcache_vtable::seq_fork, "seq_fork")(&th_kvcache_vtable::seq_blocks, "seq_blocks")(
          &th_kvcache_vtable::stats, "stats");
      break;
    case TH_KIND_MOE:
      required<th_moe_vtable>(vtable, missing)(&th_moe_vtable::gate, "gate")(&th_moe_vtable::experts, "experts");
      break;
    case TH_KIND_SPEC_DECODE:
      required<th_spec_decode_vtable>(vtable, missing)(&th_spec_decode_vtable::propose, "propose");
      break;
    case TH_KIND_SCHEDULER:
      required<th_scheduler_vtable>(vtable, missing)(&th_scheduler_vtable::schedule, "schedule");
      break;
    case TH_KIND_ROUTER:
      required<th_router_vtable>(vtable, missing)(&th_router_vtable::route, "route");
      break;
    case TH_KIND_KV_CONNECTOR:
      required<th_kv_connector_vtable>(vtable, missing)(&th_kv_connector_vtable::contains, "contains")(
          &th_kv_connector_vtable::save, "save")(&th_kv_connector_vtable::load, "load")(&th_kv_connector_vtable::poll, "poll")(
          &th_kv_connector_vtable::cancel, "cancel")(&th_kv_connector_vtable::stats, "stats");
      break;
    case TH_KIND_CONSTRAINT:
      required<th_constraint_vtable>(vtable, missing)(&th_constraint_vtable::compile, "compile")(
          &th_constraint_vtable::release, "release")(&th_constraint_vtable::start, "start")(&th_constraint_vtable::clone, "clone")(
          &th_constraint_vtable::free_state, "free_state")(&th_constraint_vtable::advance, "advance")(&th_constraint_vtable::masks, "masks");
      break;
    default: break;
  }
  return missing;
}

}  // namespace tokenhost
