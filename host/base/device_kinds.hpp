// Device kinds and how a manifest names a device: the one table of kind names ("cpu", "cuda") that a
// deployment's device ("cuda:0"), a plugin.toml's devices list, the backends' names (Backend::name)
// and the host's messages read. Names only: which devices this machine has is base/devices.hpp's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

// A kind's name ("unknown" for none in the table), the kind of a name, every name in table order.
const char* device_kind_name(th_device_kind kind);
std::optional<th_device_kind> device_kind_named(std::string_view name);
const std::vector<std::string>& device_kind_names();

// A device as a manifest names it: "<kind>" or "<kind>:<index>" ("cpu", "cuda:0"; no index is 0).
struct DeviceRef {
  th_device_kind kind = TH_DEVICE_CPU;
  int32_t index = 0;
  std::string str() const;  // "cpu" for the CPU, "<kind>:<index>" otherwise
};
// The device `text` names, or nullopt with why set ("unknown device kind 'gpu'", "bad index ...").
std::optional<DeviceRef> parse_device(const std::string& text, std::string* why = nullptr);

}  // namespace tokenhost
