// Synthetic models: a Llama shape (dense or MoE) with seeded random weights, all f32. They let a
// deployment run, deterministically, without a model file.
#pragma once

#include <cstdint>
#include <memory>

#include "base/model_weights.hpp"

namespace tokenhost {

// Weights of spec's shape, normal-distributed with fan-in scaling, norms near 1. Same seed, same
// weights.
std::shared_ptr<const ModelWeights> make_synthetic_weights(const ModelSpec& spec, uint64_t seed);

// The bytes make_synthetic_weights allocates for a shape (f32 everything): the deployment reader
// refuses a shape this machine cannot hold before anything is allocated.
inline uint64_t synthetic_weight_bytes(const th_model_info& i) {
  const uint64_t dim = i.dim, q = uint64_t(i.n_heads) * i.head_dim, kv = uint64_t(i.n_kv_heads) * i.head_dim;
  const uint64_t experts = i.n_experts > 0 ? i.n_experts : 1;
  const uint64_t layer = 2 * dim + q * dim + 2 * kv * dim + dim * q + uint64_t(i.n_experts) * dim + experts * 3 * i.ffn_dim * dim;
  return 4 * (2 * uint64_t(i.vocab_size) * dim + dim + uint64_t(i.n_layers) * layer);
}

}  // namespace tokenhost
