// What this machine can do at most, measured: the int8 multiply-add rate of the paths the matmul
// kernels use (AVX-512 VNNI on 512- and 256-bit registers, AVX2's vpmaddubsw + vpmaddwd), the f32 FMA
// rate (the f16 and f32 kernels), and the memory bandwidth a streaming read gets, each over `threads`
// threads at once. Used by bench_machine_limits and by bench_matmul_speed's shares of the peak.
#pragma once

#include <cstddef>
#include <string>

namespace tokenhost::bench {

struct MachineLimits {
  size_t threads = 1;
  // GMAC/s over all threads; 0 where the CPU lacks the instructions.
  double int8_vnni512 = 0, int8_vnni256 = 0, int8_avx2 = 0;
  double f32_fma512 = 0, f32_fma256 = 0;
  double bandwidth_gbs = 0;  // GB/s (1e9 bytes) read from DRAM
  // The best int8 and f32 rates this CPU has.
  double int8_peak() const;
  double f32_peak() const;
};

// Each figure is the median of `runs` measurements of about `seconds` each.
MachineLimits measure_machine_limits(size_t threads, int runs = 5, double seconds = 0.25);

// What an 8-row pass of the packed q4_0 kernel (matmul_avx512_int8.cpp) is made of, each on top of the
// one before, as GMAC/s of one thread on 512-bit VNNI with every operand in L1: where the kernel's
// figure stands between the bare instruction's peak and what its other instructions leave of it.
// Zeros where the CPU lacks AVX-512 VNNI.
struct KernelMix {
  double chains = 0;        // vpdpbusd on 8 activation rows' chunk lines, 8 chains across the groups
  double restarted = 0;     // each group's chains start from its bias line, then add to the row's sum
  double float_step = 0;    // that, the add replaced by the kernels' float step (convert, dw x dx, fma)
  double q4_0_weights = 0;  // restarted, with a q4_0 weight row's chunks loaded and unpacked per group
  double kernel = 0;        // both: the 8-row kernel's mix of instructions
};
KernelMix measure_kernel_mix(int runs = 5, double seconds = 0.25);

// The memory bandwidth a streaming read gets over `threads` threads, each reading its slice of a
// buffer far larger than the caches (512 MiB, kept and mapped for the next measurement): what a decode
// reading its weights can reach at most. A figure moves with the machine's memory traffic, by up to
// 1.6x between minutes on the 2-core VM: measure it beside what it is the floor of.
class ReadBandwidth {
 public:
  explicit ReadBandwidth(size_t threads);
  ~ReadBandwidth();
  ReadBandwidth(const ReadBandwidth&) = delete;
  ReadBandwidth& operator=(const ReadBandwidth&) = delete;
  double gbs(double seconds = 0.25) const;  // GB/s (1e9 bytes), one measurement

 private:
  static constexpr size_t kBytes = size_t(512) << 20;
  size_t threads_, slice_;
  unsigned char* data_;
};

}  // namespace tokenhost::bench
