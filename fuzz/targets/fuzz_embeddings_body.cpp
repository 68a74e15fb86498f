// POST /v1/embeddings' body on arbitrary bytes: read strictly (parse_embeddings_body), every accepted
// input's parameter name formed, and a vector encoded as base64. Errors come back as values; nothing
// may throw or crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/embeddings_body.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace api = tokenhost::api;
  auto r = api::parse_embeddings_body(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!r) return 0;
  for (size_t i = 0; i < r.value().inputs.size(); ++i) (void)r.value().param(i);
  std::vector<float> v(size % 7, 0.5f);
  (void)api::base64_floats(v);
  return 0;
}
