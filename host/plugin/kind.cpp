#include "plugin/kind.hpp"

#include <cstddef>

namespace tokenhost {
namespace {

struct KindInfo {
  th_kind kind;
  const char* name;
  size_t vtable_size;
};

constexpr KindInfo kKinds[] = {
    {TH_KIND_ATTENTION, "attention", sizeof(th_attention_vtable)},
    {TH_KIND_KVCACHE, "kvcache", sizeof(th_kvcache_vtable)},
    {TH_KIND_MOE, "moe", sizeof(th_moe_vtable)},
    {TH_KIND_SPEC_DECODE, "spec_decode", sizeof(th_spec_decode_vtable)},
    {TH_KIND_SCHEDULER, "scheduler", sizeof(th_scheduler_vtable)},
    {TH_KIND_ROUTER, "router", sizeof(th_router_vtable)},
};

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
    if (k.kind == kind) return k.name;
  return "unknown(" + std::to_string(kind) + ")";
}

std::optional<th_kind> kind_from_name(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.name) return k.kind;
  return std::nullopt;
}

const std::vector<std::string>& kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& k : kKinds) v.emplace_back(k.name);
    return v;
  }();
  return names;
}

size_t vtable_size(th_kind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k.vtable_size;
  return 0;
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
    default: break;
  }
  return missing;
}

}  // namespace tokenhost
