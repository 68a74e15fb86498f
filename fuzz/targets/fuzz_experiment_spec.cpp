// An A/B experiment as POST /admin/experiments hands it over (client JSON, depth-bounded while parsed),
// engine arms or router arms: read strictly (spec_from_json), validated against a fixed set of engines,
// then the same body read as a split change (apply_change, PATCH /admin/experiments/NAME) and
// validated again, and every arm assigned a bucket. Problems come back as values; nothing may throw or
// crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/client_json.hpp"
#include "experiments/experiment.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tokenhost::experiments;
  auto body = tokenhost::api::parse_client_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!body) return 0;
  static const std::vector<EngineView> engines = {{"a", "m", ""}, {"b", "m", ""}, {"c", "other", "x"}};
  auto parsed = spec_from_json(body.value());
  if (auto* spec = std::get_if<ExperimentSpec>(&parsed)) {
    const bool valid = validate(*spec, engines, {"y"}).empty();
    auto changed = apply_change(*spec, body.value());
    if (auto* again = std::get_if<ExperimentSpec>(&changed)) (void)validate(*again, engines);
    if (valid)
      for (uint32_t bucket = 0; bucket < 100; bucket += 7) (void)assign(*spec, bucket, "batch");
  }
  return 0;
}
