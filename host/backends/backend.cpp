#include "backends/backend.hpp"

#include <cstdlib>

namespace tokenhost {

// Defined in backends/<name>/.
const Backend& cpu_backend();
const Backend& cuda_backend();

const std::vector<const Backend*>& backends() {
  static const std::vector<const Backend*> all = {&cpu_backend(), &cuda_backend()};
  return all;
}

const Backend* find_backend(const std::string& device, int32_t* index) {
  const size_t colon = device.find(':');
  const std::string name = device.substr(0, colon);
  int32_t i = 0;
  if (colon != std::string::npos) {
    const std::string digits = device.substr(colon + 1);
    if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return nullptr;
    i = int32_t(std::atoi(digits.c_str()));
  }
  if (index != nullptr) *index = i;
  for (const Backend* b : backends())
    if (name == b->name()) return b;
  return nullptr;
}

}  // namespace tokenhost
