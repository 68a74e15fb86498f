#include "base/devices.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "base/cuda_module.h"
#include "util/system_memory.hpp"

namespace tokenhost {
namespace {

struct CudaModule {
  void* handle = nullptr;
  decltype(&tokenhost_cuda_device_count) device_count = nullptr;
  decltype(&tokenhost_cuda_device_info) device_info = nullptr;
  decltype(&tokenhost_cuda_alloc) alloc = nullptr;
  decltype(&tokenhost_cuda_free) free = nullptr;
};

struct Inventory {
  std::vector<DeviceInfo> devices;
  CudaModule cuda;
  std::string cuda_reason;
};

template <class F>
bool bind(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

void probe_cuda(Inventory& inv) {
#ifdef TOKENHOST_CUDA_MODULE_PATHS
  const char* paths[] = {TOKENHOST_CUDA_MODULE_PATHS};
  std::string errors;
  for (const char* path : paths) {
    inv.cuda.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (inv.cuda.handle != nullptr) break;
    errors += std::string(dlerror()) + "; ";
  }
  if (inv.cuda.handle == nullptr) {
    inv.cuda_reason = "the CUDA module could not be opened: " + errors;
    return;
  }
  CudaModule& m = inv.cuda;
  if (!bind(m.handle, "tokenhost_cuda_device_count", m.device_count) ||
      !bind(m.handle, "tokenhost_cuda_device_info", m.device_info) ||
      !bind(m.handle, "tokenhost_cuda_alloc", m.alloc) || !bind(m.handle, "tokenhost_cuda_free", m.free)) {
    inv.cuda_reason = "the CUDA module lacks its symbols";
    return;
  }
  char message[256] = {0};
  int count = m.device_count(message, sizeof message);
  if (count <= 0) {
    inv.cuda_reason = count < 0 ? std::string("CUDA: ") + message : "CUDA: no device found";
    return;
  }
  for (int i = 0; i < count; ++i) {
    DeviceInfo d;
    d.kind = TH_DEVICE_CUDA;
    d.index = i;
    char name[256] = {0};
    m.device_info(i, name, sizeof name, &d.memory_bytes);
    d.name = DeviceRef{TH_DEVICE_CUDA, i}.str() + " " + name;
    inv.devices.push_back(d);
  }
#else
  inv.cuda_reason = "this build has no CUDA backend (no CUDA toolkit was found at build time)";
#endif
}

Inventory& inventory() {
  static Inventory inv = [] {
    Inventory i;
    DeviceInfo cpu;
    cpu.name = device_kind_name(TH_DEVICE_CPU);
    cpu.threads = std::max(1u, std::thread::hardware_concurrency());
    cpu.memory_bytes = physical_memory_bytes();  // what plugins check pools against
    i.devices.push_back(cpu);
    probe_cuda(i);
    if (!i.cuda_reason.empty()) spdlog::debug("no CUDA device: {}", i.cuda_reason);
    return i;
  }();
  return inv;
}

}  // namespace

const std::vector<DeviceInfo>& devices() { return inventory().devices; }

const DeviceInfo* find_device(const DeviceRef& ref) {
  for (const auto& d : devices())
    if (d.kind == ref.kind && d.index == ref.index) return &d;
  return nullptr;
}
const std::string& cuda_unavailable_reason() { return inventory().cuda_reason; }

void* cuda_module_alloc(int32_t index, size_t bytes, std::string& why, th_status& status) {
  Inventory& inv = inventory();
  bool present = false;
  for (const auto& d : inv.devices) present = present || (d.kind == TH_DEVICE_CUDA && d.index == index);
  if (inv.cuda.alloc == nullptr || !present) {
    why = "no CUDA device " + std::to_string(index) +
          (inv.cuda_reason.empty() ? std::string() : " (" + inv.cuda_reason + ")");
    status = TH_ERR_UNSUPPORTED;
    return nullptr;
  }
  char message[256] = {0};
  void* p = inv.cuda.alloc(index, bytes, message, sizeof message);
  if (p == nullptr) {
    why = std::string("CUDA allocation of ") + std::to_string(bytes) + " bytes failed: " + message;
    status = TH_ERR_OUT_OF_MEMORY;
  }
  return p;
}

void cuda_module_free(void* ptr) {
  if (ptr != nullptr && inventory().cuda.free != nullptr) inventory().cuda.free(ptr);
}

}  // namespace tokenhost
