// Plugin kinds: the ABI's th_kind numbers and their manifest names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

// "attention", "kvcache", ...; "unknown(N)" for numbers the ABI does not define.
std::string kind_name(th_kind kind);
std::optional<th_kind> kind_from_name(const std::string& name);
const std::vector<std::string>& kind_names();
// sizeof the vtable of kind as this host knows it: the members it may call.
size_t vtable_size(th_kind kind);
// The required vtable members of kind that are NULL in vtable (whose struct_size was checked).
std::vector<std::string> missing_vtable_members(th_kind kind, const void* vtable);

}  // namespace tokenhost
