// The AVX-512 VNNI kernel set, on 256-bit registers: `vpdpbusd ymm` multiplies unsigned by signed
// bytes and sums each four into an int32 lane in one instruction, where AVX2 needs sign, maddubs and
// madd. 512-bit registers are not used: on the Xeons that have VNNI they lower the clock and share
// one port, and were measured slower. The AVX-512 VL encoding also gives 32 vector registers.
//
// The weights become unsigned by an offset K (q8_0: w + 128, by flipping the sign bit; q4_0: the
// nibble itself, that is w + 8), and each lane starts at the activation row's bias, -K times the sum
// of its four activation bytes: each lane then holds the exact signed dot product of its four
// elements, the same integers as the AVX2 set's.
#include "runtime/matmul_kernels.hpp"

#if defined(__x86_64__)
#include "runtime/matmul_x86.hpp"

#define TH_VNNI_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
#define TH_VNNI __attribute__((target(TH_VNNI_TARGET)))
#define TH_VNNI_INLINE __attribute__((target(TH_VNNI_TARGET), always_inline)) inline

namespace tokenhost::matmul_detail {
namespace {

// The scale of each of R rows at block b, dw * d_k, broadcast to 8 lanes. For four rows the four
// products are one multiplication (the same rounding as four), each then spread by a permutation.
template <size_t R>
TH_VNNI_INLINE void scales(float dw, const QRows& x, size_t b, __m256* s) {
  static_assert(R == 1 || R == 4, "tiles of one or four rows");
  if constexpr (R == 1) {
    s[0] = _mm256_set1_ps(dw * x.d[b * x.d_stride]);
  } else {
    const __m256 p = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(dw), _mm_loadu_ps(x.d + b * x.d_stride)));
    #pragma GCC unroll 8
    for (size_t k = 0; k < R; ++k) s[k] = _mm256_permutevar8x32_ps(p, _mm256_set1_epi32(int(k)));
  }
}

// acc[k] += (lanes of the unsigned weights wu against row k's block b) * (dw * d_k[b]), k < R.
template <size_t R>
TH_VNNI_INLINE void block_vnni(__m256i wu, float dw, const QRows& x, size_t nb, size_t b, __m256* acc) {
  __m256 s[R];
  scales<R>(dw, x, b, s);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) {
    const QBlock& xb = x.blocks[k * nb + b];
    const __m256i lanes = _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(xb.bias)), wu,
                                              _mm256_load_si256(reinterpret_cast<const __m256i*>(xb.q)));
    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), s[k], acc[k]);
  }
}

TH_VNNI_INLINE __m256i unsigned_q8_0(const BlockQ8_0& w) {
  return _mm256_xor_si256(load256(w.q), _mm256_set1_epi8(char(0x80)));
}

// A q4_0 block's nibbles as bytes 0..15 in element order: the 16 packed bytes in both halves, the
// upper half shifted right by 4.
TH_VNNI_INLINE __m256i unsigned_q4_0(const BlockQ4_0& w) {
  const __m256i packed = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.q)));
  const __m256i shift = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
  return _mm256_and_si256(_mm256_srlv_epi16(packed, shift), _mm256_set1_epi8(0x0F));
}

// Blocks in pairs, into two accumulators per row (the FMA chains overlap), a last odd block into the
// first; as the AVX2 q8_0 kernel.
template <class Block, __m256i (*Unpack)(const Block&), size_t R>
TH_VNNI void dot_vnni(const uint8_t* wp, size_t, const QRows& x, size_t nb, float* out) {
  const Block* w = reinterpret_cast<const Block*>(wp);
  __m256 a0[R], a1[R];
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) a0[k] = a1[k] = _mm256_setzero_ps();
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    block_vnni<R>(Unpack(w[b]), _cvtsh_ss(w[b].d), x, nb, b, a0);
    block_vnni<R>(Unpack(w[b + 1]), _cvtsh_ss(w[b + 1].d), x, nb, b + 1, a1);
  }
  if (b < nb) block_vnni<R>(Unpack(w[b]), _cvtsh_ss(w[b].d), x, nb, b, a0);
  #pragma GCC unroll 8
  for (size_t k = 0; k < R; ++k) out[k] = hsum(_mm256_add_ps(a0[k], a1[k]));
}

template <class Block, __m256i (*Unpack)(const Block&)>
TypeKernels<QRows> type_kernels(int bias_k) {
  TypeKernels<QRows> k;
  k.one = dot_vnni<Block, Unpack, 1>;
  k.four = dot_vnni<Block, Unpack, 4>;
  k.bias_k = bias_k;
  return k;
}

}  // namespace

const KernelSet* avx512vnni_set() {
  static const KernelSet* set = []() -> const KernelSet* {
    const KernelSet* avx2 = avx2_set();
    if (avx2 == nullptr || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vnni"))
      return nullptr;
    static const KernelSet s{"avx512vnni", quantize_avx2, avx2->f32, avx2->f16,
                             type_kernels<BlockQ8_0, unsigned_q8_0>(128), type_kernels<BlockQ4_0, unsigned_q4_0>(8)};
    return &s;
  }();
  return set;
}

}  // namespace tokenhost::matmul_detail

#else

namespace tokenhost::matmul_detail {
const KernelSet* avx512vnni_set() { return nullptr; }
}  // namespace tokenhost::matmul_detail

#endif
