// Reading a member of an ABI struct or vtable that may have been filled by a plugin built against an
// older minor (th_common.h, GROWTH): the member exists only when the filler's struct_size covers it.
// Every host read of a vtable member (PluginInstance::fn) and of a plugin-filled struct member added
// after ABI 1.0 goes through abi_member(), so nothing past a struct_size is ever called or read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tokenhost {

// Bytes from the start of S through the end of member (TH_SIZE_THROUGH for a member pointer).
template <class S, class M>
size_t abi_size_through(M S::*member) {
  static const S probe{};
  return size_t(reinterpret_cast<const char*>(&(probe.*member)) - reinterpret_cast<const char*>(&probe)) + sizeof(M);
}

// s.*member when s.struct_size covers it, else `absent` (NULL for a function pointer).
template <class S, class M>
M abi_member(const S& s, M S::*member, M absent = M{}) {
  return size_t(s.struct_size) >= abi_size_through(member) ? s.*member : absent;
}

}  // namespace tokenhost
