// Plugin kinds: the ABI's th_kind numbers and their manifest names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

// One table of slots (kind.cpp): a slot is where an instance of one plugin kind serves, and its row
// says everything the host decides by it. Manifest validation, the server's admin operations, the
// engine and worker actors, the CLI's status and the metrics all read it; adding a kind means its
// header under sdk/include/tokenhost/, its row, and its call site (README, "Adding a kind").

// The actor that owns a slot's instance: it is called from that actor only, and swapped by it.
enum class SlotOwner { router, engine, worker };
// Whether a deployment must fill a slot: always, only for a model with experts, or never.
enum class SlotNeed { always, moe_models, optional };
// How a swap takes effect: live (the next step or request uses the new instance, the old one goes
// when its last step is done), or a new engine with the new plugin beside the old one, which drains
// (the KV layout changes: blocks cannot move between layouts).
enum class SwapMode { live, new_engine };

struct SlotInfo {
  th_kind kind;
  const char* name;            // the manifest key, admin path segment, status key and metric label
  const char* header;          // its ABI header in sdk/include/tokenhost/
  SlotNeed need;
  SlotOwner owner;
  SwapMode swap;
  bool unloadable;             // an admin unload may empty it (only optional slots)
  const char* default_plugin;  // the plugin a deployment gets when it names none; "" for none
  // Several instances serve the slot as an ordered list (the first is called first), rather than one.
  bool stacks = false;
};

// A slot as the host's code names it: its row in slot_table(). Code that calls one kind names it by
// the kind's ABI constant, slot_of(TH_KIND_KVCACHE); a slot's name is for manifests, admin paths,
// status keys and metric labels (SlotInfo::name), read from the table.
class SlotId {
 public:
  constexpr SlotId() = default;
  size_t index() const { return index_; }
  const SlotInfo& info() const;
  const char* name() const { return info().name; }
  th_kind kind() const { return info().kind; }
  friend bool operator==(SlotId a, SlotId b) { return a.index_ == b.index_; }
  friend bool operator<(SlotId a, SlotId b) { return a.index_ < b.index_; }

 private:
  friend const std::vector<SlotId>& all_slots();
  explicit constexpr SlotId(uint8_t index) : index_(index) {}
  uint8_t index_ = 0;
};

// The slot of kind (every kind has one). Throws std::logic_error for a number the table lacks.
SlotId slot_of(th_kind kind);
// The slot named `name` (a manifest key, an admin path segment), or nullopt.
std::optional<SlotId> slot_named(const std::string& name);
// Every slot, in table order; those one actor owns, in table order.
const std::vector<SlotId>& all_slots();
std::vector<SlotId> slots_owned_by(SlotOwner owner);

// Every slot, in the order status and listings show them.
const std::vector<SlotInfo>& slot_table();
// The row of slot `name`, or NULL.
const SlotInfo* find_slot(const std::string& name);
// The names of the slots an engine holds (owner engine or worker), in table order.
const std::vector<std::string>& engine_slot_names();
// Whether a deployment must fill slot for a model with n_experts experts per layer.
bool slot_required(const SlotInfo& slot, uint32_t n_experts);

// "attention", "kvcache", ...; "unknown(N)" for numbers the ABI does not define.
std::string kind_name(th_kind kind);
std::optional<th_kind> kind_from_name(const std::string& name);
const std::vector<std::string>& kind_names();
// The size of kind's vtable in ABI minor `minor` of this host's major (a minor newer than the host's
// is read as the host's): what a plugin declaring that minor must fill. 0 for an unknown kind.
size_t vtable_size(th_kind kind, uint16_t minor = TH_ABI_VERSION_MINOR);
// The required vtable members of kind that are NULL in vtable (whose struct_size was checked).
std::vector<std::string> missing_vtable_members(th_kind kind, const void* vtable);

}  // namespace tokenhost
