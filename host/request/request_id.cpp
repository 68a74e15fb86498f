#include "request/request_id.hpp"

#include <mutex>
#include <random>

namespace tokenhost::request {

uint64_t draw_random() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(m);
  return rng();
}

std::string new_request_id() {
  static const char hex[] = "0123456789abcdef";
  const uint64_t a = draw_random(), b = draw_random();
  std::string id = "req-";
  for (int i = 0; i < 16; ++i) id += hex[(a >> (4 * i)) & 15];
  for (int i = 0; i < 8; ++i) id += hex[(b >> (4 * i)) & 15];
  return id;
}

std::string request_id_from(std::string_view sent) {
  if (sent.empty() || sent.size() > kMaxRequestIdBytes) return new_request_id();
  for (char c : sent) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    c == '.' || c == ':' || c == '/' || c == '+' || c == '=';
    if (!ok) return new_request_id();
  }
  return std::string(sent);
}

}  // namespace tokenhost::request
