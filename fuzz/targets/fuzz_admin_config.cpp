// An admin change's body: client JSON (depth-bounded while parsed), then its "config" as the TOML table
// plugins read. Nesting that passes the parser must convert without exhausting the stack.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "api/client_json.hpp"
#include "util/json_to_toml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto body = tokenhost::api::parse_client_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!body || !body.value().is_object()) return 0;
  try {
    (void)tokenhost::json_to_toml(body.value());
  } catch (const std::invalid_argument&) {  // a null: named, refused
  }
  return 0;
}
