// The malloc settings serve runs with (base/allocator_tuning.hpp): a step's pattern of large buffers,
// allocated, written and freed again and again on one thread, faults in fresh pages only the first time.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <thread>
#include <vector>

#include "base/allocator_tuning.hpp"

namespace base_allocator_tuning_tests {

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

constexpr size_t kRows = 64, kVocab = 32000;

// One step's logits of a 64-row decode on a 32000-token vocabulary, as the CPU backend hands them over:
// a vector of each row's (128 KB each, just below glibc's default threshold for mapping a block), every
// byte written, all freed.
void one_step(const std::vector<float>& all) {
  std::vector<std::vector<float>> per_row;
  for (size_t r = 0; r < kRows; ++r)
    per_row.emplace_back(all.begin() + long(r * kVocab), all.begin() + long((r + 1) * kVocab));
  volatile float sink = per_row.back().back();
  (void)sink;
}

}  // namespace

TEST_CASE("allocator tuning: repeated steps of large buffers fault in no fresh pages after the first",
          "[allocator]") {
  tokenhost::tune_allocator_for_serving();
  long first = 0, later = 0;
  // A thread of its own, as an engine's worker steps on one (and may get an arena of its own).
  const std::vector<float> all(kRows * kVocab, 1.0f);  // the backend keeps its buffer from step to step
  std::thread([&] {
    const long f0 = minor_faults();
    one_step(all);
    const long f1 = minor_faults();
    for (int i = 0; i < 20; ++i) one_step(all);
    first = f1 - f0;
    later = minor_faults() - f1;
  }).join();
  INFO("minor faults: first step " << first << ", the next 20 steps " << later);
  // A step writes 8 MB, about 2000 pages: without the settings each of the 20 later steps faults in
  // about as many again (glibc hands the freed memory back to the system); with them, none but the few
  // other threads of the test process may fault meanwhile. (The first step may find free memory in the
  // arena its thread got from earlier tests, so its own count is not asserted.)
  CHECK(later < 1000);
}

}  // namespace base_allocator_tuning_tests
