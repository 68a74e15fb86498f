#include "backends/backend.hpp"


namespace tokenhost {

// Defined in backends/<name>/.
const Backend& cpu_backend();
const Backend& cuda_backend();

const std::vector<const Backend*>& backends() {
  static const std::vector<const Backend*> all = {&cpu_backend(), &cuda_backend()};
  return all;
}

const Backend* find_backend(const std::string& device, int32_t* index, std::string* why) {
  const auto ref = parse_device(device, why);
  if (!ref) return nullptr;
  if (index != nullptr) *index = ref->index;
  const Backend* b = find_backend(ref->kind);
  if (b == nullptr && why != nullptr) *why = std::string("this host has no ") + device_kind_name(ref->kind) + " backend";
  return b;
}

const Backend* find_backend(th_device_kind kind) {
  for (const Backend* b : backends())
    if (b->kind() == kind) return b;
  return nullptr;
}

th_status Backend::grouped_matmul(const th_grouped_matmul_args&, std::string& why) const {
  why = std::string("the ") + name() + " backend has no grouped product";
  return TH_ERR_UNSUPPORTED;
}

th_status device_grouped_matmul(th_device_kind kind, const th_grouped_matmul_args& args, std::string& why) {
  const Backend* b = find_backend(kind);
  if (b == nullptr) {
    why = "no device of kind " + std::to_string(int(kind));
    return TH_ERR_UNSUPPORTED;
  }
  return b->grouped_matmul(args, why);
}

void* device_alloc(th_device_kind kind, int32_t index, size_t bytes, size_t alignment, std::string& why,
                   th_status* status) {
  th_status ignored = TH_OK;
  th_status& st = status != nullptr ? *status : ignored;
  const Backend* b = find_backend(kind);
  if (b == nullptr) {
    why = "no device of kind " + std::to_string(int(kind));
    st = TH_ERR_UNSUPPORTED;
    return nullptr;
  }
  st = TH_OK;
  return b->alloc(index, bytes, alignment, why, st);
}

void device_free(th_device_kind kind, void* ptr) {
  if (ptr == nullptr) return;
  if (const Backend* b = find_backend(kind)) b->free(ptr);
}

}  // namespace tokenhost
