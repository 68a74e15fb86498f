// The cluster port's message decoding (cluster/wire.hpp) on arbitrary bytes: every decoder either
// returns a message within its bounds or throws WireError; nothing else may escape, nothing may crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cluster/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace cluster = tokenhost::cluster;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto attempt = [&](auto decode) {
    try {
      (void)decode(bytes);
    } catch (const cluster::WireError&) {
    }
  };
  attempt(cluster::decode_hello);
  attempt(cluster::decode_welcome);
  attempt(cluster::decode_generate);
  attempt(cluster::decode_tokens);
  attempt(cluster::decode_result);
  attempt(cluster::decode_engines);
  attempt(cluster::decode_slot_change);
  attempt(cluster::decode_admin_reply);
  attempt(cluster::decode_prefix_versions);
  // What decodes encodes again and decodes the same.
  try {
    auto g = cluster::decode_generate(bytes);
    auto again = cluster::decode_generate(cluster::encode(g));
    if (again.request.prompt != g.request.prompt) __builtin_trap();
  } catch (const cluster::WireError&) {
  }
  return 0;
}
