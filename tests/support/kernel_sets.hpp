// Runs a test body once per matmul kernel set this CPU has (portable, AVX2, AVX-512...), each selected
// in turn, and restores the one in use afterwards, even when the body fails.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "base/compute_pool.hpp"
#include "backends/cpu/matmul.hpp"

namespace tokenhost::testing {

template <class Fn>
void for_each_kernel_set(Fn fn) {
  struct Restore {
    std::string set = matmul_kernels();
    ~Restore() { use_matmul_kernels(set); }
  } restore;
  for (const std::string& set : matmul_kernel_sets()) {
    use_matmul_kernels(set);
    INFO("kernels: " << set << ", " << compute_pool().threads() << " threads");
    fn();
  }
}

}  // namespace tokenhost::testing
