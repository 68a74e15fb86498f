// Client JSON's parse cost is linear in the body whatever its shape: the input is a unit that a body
// repeats inside one container ({"a":[u,u,...]}: where a per-element cost in the enclosing container
// shows, as the callback parser's discarded-value scan once did, making 1M empty objects take
// minutes); a body of 4x the units must parse in at most 6x the time of one of n units (best of 5
// each, n chosen so that the smaller body is at least 16 KiB, plus 10 ms for the clock and scheduling).
// A slower parse aborts: libFuzzer reports it as a crash with the unit that caused it.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/client_json.hpp"

namespace {

std::string body_of(std::string_view unit, size_t n) {
  std::string body = "{\"a\":[";
  body.reserve(8 + n * (unit.size() + 1));
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) body += ',';
    body += unit;
  }
  return body + "]}";
}

double seconds(const std::string& body) {
  const auto started = std::chrono::steady_clock::now();
  (void)tokenhost::api::parse_client_json(body);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

// Whether the large body parses within 6x the small one's time (+10 ms): best of 5 each, measured
// alternately, so that a moment of load on the machine (CTest runs other tests beside) slows both.
bool within_bound(const std::string& small, const std::string& large, double& t1, double& t4) {
  t1 = t4 = 1e9;
  for (int run = 0; run < 5; ++run) {
    t1 = std::min(t1, seconds(small));
    t4 = std::min(t4, seconds(large));
  }
  return t4 <= 6 * t1 + 0.010;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 256) return 0;  // a unit; the body is made of thousands of them
  const std::string_view unit(reinterpret_cast<const char*>(data), size);
  const size_t n = std::max<size_t>(16, (16 << 10) / (size + 1));
  const std::string small = body_of(unit, n), large = body_of(unit, 4 * n);
  double t1 = 0, t4 = 0;
  // A quadratic parse fails every time; a measurement the machine disturbed passes when taken again.
  if (!within_bound(small, large, t1, t4) && !within_bound(small, large, t1, t4)) {
    std::fprintf(stderr, "client JSON parse not linear: %zu units %.2f ms, %zu units %.2f ms (%.1fx for 4x the input)\n", n,
                 1e3 * t1, 4 * n, 1e3 * t4, t4 / t1);
    std::abort();
  }
  return 0;
}
