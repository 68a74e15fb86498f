// The devices this host can run on and their memory: the CPU always, CUDA GPUs when the CUDA backend
// module is built and a driver with a device is present. The host never links the CUDA runtime itself:
// backends/cuda is a module opened at run time, so the binary starts on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

namespace tokenhost {

struct DeviceInfo {
  th_device_kind kind = TH_DEVICE_CPU;
  int32_t index = 0;
  std::string name;          // "cpu", "cuda:0 NVIDIA H200"
  uint64_t memory_bytes = 0;
  uint32_t threads = 0;      // CPU: hardware threads
};

// Every device found (probed once, on first use). The CPU is always first.
const std::vector<DeviceInfo>& devices();
// Why no CUDA device is listed ("" when one is): module missing, no driver, no device.
const std::string& cuda_unavailable_reason();

// Allocates bytes aligned to alignment (a power of two) on a device; NULL with why set on failure, and
// *status (when given) TH_ERR_UNSUPPORTED for a device this host does not have, TH_ERR_OUT_OF_MEMORY
// when the device has no room.
void* device_alloc(th_device_kind kind, int32_t index, size_t bytes, size_t alignment, std::string& why,
                   th_status* status = nullptr);
void device_free(th_device_kind kind, void* ptr);

}  // namespace tokenhost
