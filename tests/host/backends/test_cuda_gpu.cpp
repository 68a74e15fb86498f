// GPU check (CTest label "gpu"): with a CUDA device, the host lists it and plugins can allocate and
// free device memory through the host API. Without one it exits 77, which CTest reports as skipped.
#include <cstdio>

#include "base/devices.hpp"
#include "plugin/host_api.hpp"

using namespace tokenhost;

int main() {
  const DeviceInfo* gpu = nullptr;
  for (const auto& d : devices())
    if (d.kind == TH_DEVICE_CUDA) gpu = &d;
  if (gpu == nullptr) {
    std::printf("SKIPPED: no CUDA device: %s\n", cuda_unavailable_reason().c_str());
    return 77;
  }
  std::printf("found %s with %.1f GiB\n", gpu->name.c_str(), double(gpu->memory_bytes) / (1ull << 30));
  th_host_ctx ctx;
  ctx.plugin_id = "test.gpu";
  th_error err;
  void* p = nullptr;
  if (host_api()->mem_alloc(&ctx, TH_DEVICE_CUDA, gpu->index, 1 << 20, 256, &p, &err) != TH_OK || p == nullptr) {
    std::printf("FAILED: CUDA allocation: %s\n", err.text().c_str());
    return 1;
  }
  host_api()->mem_free(&ctx, p);
  if (ctx.bytes_allocated != 0) {
    std::printf("FAILED: accounting left %zu bytes\n", ctx.bytes_allocated);
    return 1;
  }
  std::printf("CUDA allocation through the host API: ok\n");
  return 0;
}
