// How a test skips when what it checks cannot exist here (a missing shared model file, a CPU without
// the kernels it checks): it says SKIPPED and why, and the process exits with 77, which CTest reports
// as skipped, never as passed (tests/CMakeLists.txt sets SKIP_RETURN_CODE 77).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tokenhost::testing {

[[noreturn]] inline void skip_test(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

}  // namespace tokenhost::testing
