// The devices this host can run on: the CPU always, CUDA GPUs when the CUDA module is built and a
// driver with a device is present. Memory on them is each backend's (backends/backend.hpp: alloc). The
// host never links the CUDA runtime itself: backends/cuda is a module opened at run time, so the binary
// starts on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <tokenhost/tokenhost.h>

#include "base/device_kinds.hpp"

namespace tokenhost {

struct DeviceInfo {
  th_device_kind kind = TH_DEVICE_CPU;
  int32_t index = 0;
  std::string name;          // "cpu", "cuda:0 NVIDIA H200"
  uint64_t memory_bytes = 0;  // total: the machine's RAM for the CPU
  uint32_t threads = 0;      // CPU: hardware threads
};

// Every device found (probed once, on first use). The CPU is always first.
const std::vector<DeviceInfo>& devices();
// The device found of this kind and index, or NULL.
const DeviceInfo* find_device(const DeviceRef& ref);
// Why no CUDA device is listed ("" when one is): module missing, no driver, no device.
const std::string& cuda_unavailable_reason();

// The CUDA module's memory calls, for the CUDA backend (backends/cuda/cuda_backend.cpp): NULL with why
// set and *status TH_ERR_UNSUPPORTED when the module or device `index` is absent, TH_ERR_OUT_OF_MEMORY
// when the device has no room.
void* cuda_module_alloc(int32_t index, size_t bytes, std::string& why, th_status& status);
void cuda_module_free(void* ptr);

// Memory on a device through its backend (the host API's mem_alloc, the CPU kernels' packed copies):
// Backend::alloc, and a kind no backend drives refused with TH_ERR_UNSUPPORTED. Declared here, for the
// layers below the backends (the plugin host); defined with the backend registry (backends/backend.cpp).
void* device_alloc(th_device_kind kind, int32_t index, size_t bytes, size_t alignment, std::string& why,
                   th_status* status = nullptr);
void device_free(th_device_kind kind, void* ptr);

// The grouped product of th_host_api.grouped_matmul (its arguments already checked against the
// header's rules) by the backend of device `kind`: Backend::grouped_matmul; TH_ERR_UNSUPPORTED with why
// set where no backend drives the kind or it has no grouped product. Declared here for the plugin host,
// defined with the registry.
th_status device_grouped_matmul(th_device_kind kind, const th_grouped_matmul_args& args, std::string& why);

}  // namespace tokenhost
