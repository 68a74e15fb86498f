#include "base/device_kinds.hpp"

namespace tokenhost {

namespace {
struct DeviceKindRow {
  th_device_kind kind;
  const char* name;
};
constexpr DeviceKindRow kDeviceKinds[] = {{TH_DEVICE_CPU, "cpu"}, {TH_DEVICE_CUDA, "cuda"}};
}  // namespace

const char* device_kind_name(th_device_kind kind) {
  for (const auto& row : kDeviceKinds)
    if (row.kind == kind) return row.name;
  return "unknown";
}

std::optional<th_device_kind> device_kind_named(std::string_view name) {
  for (const auto& row : kDeviceKinds)
    if (name == row.name) return row.kind;
  return std::nullopt;
}

const std::vector<std::string>& device_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& row : kDeviceKinds) out.emplace_back(row.name);
    return out;
  }();
  return names;
}

std::string DeviceRef::str() const {
  return kind == TH_DEVICE_CPU ? device_kind_name(kind) : std::string(device_kind_name(kind)) + ":" + std::to_string(index);
}

std::optional<DeviceRef> parse_device(const std::string& text, std::string* why) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const auto kind = device_kind_named(name);
  if (!kind) {
    if (why != nullptr) *why = "unknown device kind '" + name + "'";
    return std::nullopt;
  }
  DeviceRef ref;
  ref.kind = *kind;
  if (colon != std::string::npos) {
    const std::string digits = text.substr(colon + 1);
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) {
      if (why != nullptr) *why = "the index after ':' must be a number of at most 6 digits, found '" + digits + "'";
      return std::nullopt;
    }
    ref.index = int32_t(std::stol(digits));
  }
  return ref;
}

}  // namespace tokenhost
