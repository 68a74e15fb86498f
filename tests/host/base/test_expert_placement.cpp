// ExpertPlacement (base/expert_placement.hpp): the engine's start (experts in order, spare slots empty),
// each choice to a device that holds its expert, replicas taking an expert's choices in turn (against
// plain counts on fresh random choices), placements that leave an expert out or name one that does not
// exist refused with the placement kept, placements by device, and the imbalance figure.
#include <catch2/catch.hpp>

#include <map>

#include "base/expert_placement.hpp"
#include "harness.hpp"

namespace expert_placement_tests {

using namespace tokenhost;

TEST_CASE("expert placement: experts start in order, each choice goes to a device holding its expert, replicas in turn", "[moe][expert_placement]") {
  ExpertPlacement p(2, 8, 2, 5);
  CHECK(p.slots(0) == std::vector<int32_t>{0, 1, 2, 3, -1, 4, 5, 6, 7, -1});
  CHECK(p.first_devices(1) == std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK_THROWS(ExpertPlacement(1, 8, 2, 3));  // 6 slots for 8 experts

  // Expert 0 on both devices (two replicas), expert 7 on device 0 only.
  const std::vector<int32_t> slots{0, 1, 2, 3, 7, 0, 4, 5, 6, -1};
  REQUIRE(p.set_slots(1, slots).empty());
  CHECK(p.slots(1) == slots);
  CHECK(p.slots(0)[4] == -1);  // the other layer keeps its own
  CHECK(p.first_devices(1)[7] == 0);

  auto rng = testing::fresh_rng("expert placement assign");
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 64;
    std::vector<int32_t> ids(n);
    std::vector<float> weights(n);
    for (size_t i = 0; i < n; ++i) {
      ids[i] = int32_t(rng() % 8);
      weights[i] = rng() % 5 == 0 ? 0.0f : 0.5f;
    }
    std::vector<int32_t> device;
    p.assign(1, ids.data(), weights.data(), n, device);
    REQUIRE(device.size() == n);
    std::map<std::pair<int32_t, int32_t>, int> per;  // (expert, device) -> choices
    for (size_t i = 0; i < n; ++i) {
      if (weights[i] == 0.0f) {
        REQUIRE(device[i] == -1);  // not computed anywhere
        continue;
      }
      const int32_t e = ids[i], d = device[i];
      INFO("choice " << i << " expert " << e << " device " << d);
      REQUIRE((d == 0 || d == 1));
      bool held = false;
      for (int s = 0; s < 5; ++s) held |= slots[size_t(d) * 5 + s] == e;
      REQUIRE(held);
      ++per[{e, d}];
    }
    // Expert 0's choices alternate between its two replicas: device 0 takes the first and every other.
    const int on0 = per[{0, 0}], on1 = per[{0, 1}];
    REQUIRE((on0 == on1 || on0 == on1 + 1));
    int seen = 0;
    for (size_t i = 0; i < n; ++i)
      if (ids[i] == 0 && weights[i] != 0.0f) REQUIRE(device[i] == (seen++ % 2 == 0 ? 0 : 1));
  }
}

TEST_CASE("expert placement: a placement that leaves an expert out or names a stranger is refused, the old one kept", "[moe][expert_placement]") {
  ExpertPlacement p(1, 4, 2, 3);
  const std::vector<int32_t> start = p.slots(0);
  CHECK(p.set_slots(0, {0, 1, 2, -1, -1, -1}) == "expert 3 has no slot");
  CHECK(p.set_slots(0, {0, 1, 2, 3, 4, -1}) == "slot 4 holds expert 4, outside the layer's 4 experts");
  CHECK(p.set_slots(0, {0, 1, 2, 3, -2, -1}) == "slot 4 holds expert -2, outside the layer's 4 experts");
  CHECK(p.set_slots(0, {0, 1, 2, 3, -1}) == "5 slots do not split over 2 devices");
  CHECK(p.set_slots(3, {0, 1, 2, 3, -1, -1}) == "layer 3 of 1");
  CHECK(p.slots(0) == start);
  // By device: any count per device; the slots per device grow to the most loaded device's count.
  CHECK(p.set_devices(0, {1, 1, 1, 0}).empty());
  CHECK(p.slots_per_device(0) == 3);
  CHECK(p.slots(0) == std::vector<int32_t>{3, -1, -1, 0, 1, 2});
  CHECK(p.set_devices(0, {0, 0, 0, 0}).empty());
  CHECK(p.slots_per_device(0) == 4);
  CHECK(p.set_devices(0, {0, 2, 0, 0}) == "expert 1 placed on device 2 of 2");
  CHECK(p.set_devices(0, {0, 1}) == "2 devices for 4 experts");
}

TEST_CASE("expert placement: the imbalance figure is the busiest device over the mean, replicas sharing their expert's tokens", "[moe][expert_placement]") {
  ExpertPlacement p(1, 4, 2, 3);  // [0 1 -] [2 3 -]
  CHECK(p.imbalance(0, {0, 0, 0, 0}) == 0);
  CHECK(p.imbalance(0, {30, 10, 5, 5}) == Approx(40.0 * 2 / 50));
  REQUIRE(p.set_slots(0, {0, 2, 3, 0, 1, -1}).empty());  // expert 0 split: 15 + 5 + 5 = 25, 15 + 10 = 25
  CHECK(p.imbalance(0, {30, 10, 5, 5}) == Approx(1.0));
}

}  // namespace expert_placement_tests
