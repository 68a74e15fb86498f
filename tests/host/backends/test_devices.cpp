// Devices: the CPU is always there; CUDA is optional and its absence is explained, never a crash.
#include <catch2/catch.hpp>

#include <algorithm>

#include "base/devices.hpp"
#include "plugin/host_api.hpp"

namespace backends_devices_tests {

using namespace tokenhost;
using Catch::Matchers::Contains;

TEST_CASE("devices: the CPU comes first with its thread count", "[devices]") {
  REQUIRE_FALSE(devices().empty());
  REQUIRE(devices().front().kind == TH_DEVICE_CPU);
  REQUIRE(devices().front().threads >= 1);
}

TEST_CASE("devices: without a CUDA device, CUDA allocations are refused with the reason", "[devices]") {
  bool has_cuda = std::any_of(devices().begin(), devices().end(), [](const DeviceInfo& d) { return d.kind == TH_DEVICE_CUDA; });
  if (has_cuda) {
    SUCCEED("a CUDA device is present; the gpu-labelled test covers it");
    return;
  }
  REQUIRE_FALSE(cuda_unavailable_reason().empty());
  th_error err;
  void* p = nullptr;
  REQUIRE(host_api()->mem_alloc(nullptr, TH_DEVICE_CUDA, 0, 1024, 256, &p, &err) == TH_ERR_UNSUPPORTED);
  REQUIRE(p == nullptr);
  REQUIRE_THAT(err.text(), Contains("no CUDA device 0"));
}

}  // namespace backends_devices_tests
