// Rotary position embeddings as the CPU backend applies them: to queries and keys in the forward pass
// (forward.cpp) and to cached keys a sliding window moves (kv_shift.cpp), with the same angles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/model_weights.hpp"

namespace tokenhost {

// The rotation of each row's RoPE pairs: cos and sin of angle i = position * freq_scale *
// theta^(-2i / head_dim) for i < head_dim / 2, in double, [n_rows][head_dim / 2][2]. A step computes
// them once for every layer and for both Q and K.
void rope_angles(const std::vector<int32_t>& positions, size_t head_dim, const RopeSettings& r, std::vector<double>& cos_sin);

// Rotates n_heads vectors of head_dim by one row's angles (rope_angles). NORM rotates adjacent pairs
// (2i, 2i+1); NEOX rotates (i, i + head_dim/2).
void rope(float* v, size_t n_heads, size_t head_dim, const double* cos_sin, bool neox);

}  // namespace tokenhost
