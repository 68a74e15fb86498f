// The CUDA module (tokenhost_cuda_module.so): device discovery and memory through the CUDA runtime, the
// C interface of base/cuda_module.h. Built only when a CUDA toolkit is found; the host opens it with
// dlopen (base/devices.cpp) so that it starts without a driver. The Backend that uses it is
// cuda_backend.cpp.
#include "base/cuda_module.h"

#include <cstdio>

#include <cuda_runtime_api.h>

namespace {
void write_error(char* err, size_t size, const char* what, cudaError_t e) {
  if (err != nullptr && size > 0) std::snprintf(err, size, "%s: %s (%d)", what, cudaGetErrorString(e), int(e));
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int tokenhost_cuda_device_count(char* err, size_t err_size) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);  // leaves count unset without a driver: check e first
  if (e != cudaSuccess) {
    write_error(err, err_size, "cudaGetDeviceCount", e);
    return -1;
  }
  return count;
}

extern "C" __attribute__((visibility("default"))) int tokenhost_cuda_device_info(int index, char* name, size_t name_size,
                                                                                uint64_t* memory_bytes) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return -1;
  if (name != nullptr && name_size > 0) std::snprintf(name, name_size, "%s", prop.name);
  if (memory_bytes != nullptr) *memory_bytes = prop.totalGlobalMem;
  return 0;
}

extern "C" __attribute__((visibility("default"))) void* tokenhost_cuda_alloc(int index, size_t bytes, char* err,
                                                                            size_t err_size) {
  cudaError_t e = cudaSetDevice(index);
  if (e != cudaSuccess) {
    write_error(err, err_size, "cudaSetDevice", e);
    return nullptr;
  }
  void* p = nullptr;
  e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    write_error(err, err_size, "cudaMalloc", e);
    return nullptr;
  }
  return p;
}

extern "C" __attribute__((visibility("default"))) void tokenhost_cuda_free(void* ptr) { cudaFree(ptr); }
