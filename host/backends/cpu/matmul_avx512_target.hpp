// Compiles what follows in the including file for the avx512 kernel set's instructions (AVX-512
// F/VL/BW/DQ/VNNI, with AVX2/FMA/F16C), whatever the build flags: include it after every other header,
// and end the file's 512-bit part with `#pragma GCC pop_options`. Called only where the CPU has them.
#pragma once

#include "backends/cpu/matmul_x86.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")
#define TH_512_INLINE __attribute__((always_inline)) inline
// GCC 12's 512-bit intrinsics start their results from _mm*_undefined_*(), a self-initialized local
// that -Wuninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tokenhost::matmul_detail {

// The sum of a's lanes, added as hsum adds a 256-bit register's after the two halves.
TH_512_INLINE float hsum512(__m512 a) {
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}

}  // namespace tokenhost::matmul_detail
