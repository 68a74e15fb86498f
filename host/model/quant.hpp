// Tensor element types of GGUF model files: block layouts, (de)quantization of rows, fp16 / bf16.
//
// The numbering is ggml's (th_dtype in th_common.h follows it) and so are the byte layouts, so that a
// row read from a GGUF file written by llama.cpp's tools dequantizes here to the same floats as there.
// Supported: f32, f16, bf16, q8_0, q4_0, q4_K, q6_K. Little-endian hosts only (as GGUF files are).
//
// Layouts, per block (all multi-byte fields little-endian, fp16 = IEEE binary16):
//   f32   1 element,   4 bytes
//   f16   1 element,   2 bytes
//   bf16  1 element,   2 bytes (the high half of an f32)
//   q8_0  32 elements, 34 bytes: fp16 d, int8 q[32];                  x[i] = q[i] * d
//   q4_0  32 elements, 18 bytes: fp16 d, uint8 qs[16];                x[i] = (nibble(i) - 8) * d,
//         nibble(i) = qs[i] & 15 for i < 16, qs[i - 16] >> 4 for i >= 16
//   q4_K  256 elements, 144 bytes: fp16 d, fp16 dmin, uint8 scales[12], uint8 qs[128];
//         8 sub-blocks of 32 with a 6-bit scale sc[j] and 6-bit min m[j] packed into scales[12]
//         (ggml's get_scale_min_k4); x[i] = d * sc[j] * q(i) - dmin * m[j], j = i / 32;
//         q(i) for i = 64 * c + r: low nibble of qs[32 * c + r] when r < 32, high nibble of
//         qs[32 * c + r - 32] otherwise
//   q6_K  256 elements, 210 bytes: uint8 ql[128], uint8 qh[64], int8 scales[16], fp16 d;
//         x[i] = d * scales[i / 16] * (q(i) - 32) with the 6-bit q(i) split into 4 low bits in ql and
//         2 high bits in qh (ggml's order: see quant.cpp)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <tokenhost/th_common.h>

namespace tokenhost::quant {

// Elements per block / bytes per block of a supported type. Throw std::invalid_argument for any other
// type, naming it.
size_t block_elems(th_dtype type);
size_t block_bytes(th_dtype type);

// Bytes of a row of n elements. Throws std::invalid_argument when the type is unsupported, n is
// negative or not a multiple of the block size, or the size does not fit in size_t.
size_t row_bytes(th_dtype type, int64_t n);

// ggml's short name of a type ("f32", "f16", "q8_0", "q4_K", ... also for types this module does not
// support, e.g. "q4_1"), or "unknown(N)". The pointer is to static storage for the known names and to
// a thread-local buffer, valid until the next call on the same thread, for unknown ones.
const char* dtype_name(th_dtype type);

// The supported type called name (dtype_name's spelling; any letter case when ignore_case), or -1.
th_dtype supported_dtype(std::string_view name, bool ignore_case = false);
// The supported types' names, "f32, f16, ..." (for error messages).
const char* supported_dtype_names();

// Whether this module reads and writes the type.
bool is_supported(th_dtype type);

// Row conversions. n must be a multiple of the block size (std::invalid_argument otherwise, or for an
// unsupported type). src / dst need no particular alignment.
void dequantize_row(th_dtype type, const void* src, float* dst, int64_t n);
// Reference quantizers (deterministic: same input, same bytes). q8_0 and q4_0 are ggml's *_ref
// quantizers; q4_K and q6_K are simple quantizers (not ggml's search) with a proven per-element error
// bound: see quant.cpp. They assume finite inputs of magnitude below about 1e6.
void quantize_row(th_dtype type, const float* src, void* dst, int64_t n);

// ggml's get_scale_min_k4: q4_K sub-block j's 6-bit scale and min out of a super-block's 12 packed
// scale bytes.
inline void q4_K_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// IEEE binary16 and bfloat16. The f32 -> 16-bit conversions round to nearest, ties to even; they map
// overflow to infinity and keep NaN a (quiet) NaN of the same sign.
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// sum_i w[i] * x[i] over a row of n elements of type `type`, dequantized and accumulated in double in
// index order: the reference that optimized kernels are checked against.
double dot_row_reference(th_dtype type, const void* w, const float* x, int64_t n);

}  // namespace tokenhost::quant
