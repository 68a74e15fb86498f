// Plugin kinds: the ABI's th_kind numbers and their manifest names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

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
