// Synthetic models: a Llama shape (dense or MoE) with seeded random weights, all f32. They let a
// deployment run, deterministically, without a model file.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/model_weights.hpp"

namespace tokenhost {

// Weights of spec's shape, normal-distributed with fan-in scaling, norms near 1. Same seed, same
// weights.
std::shared_ptr<const ModelWeights> make_synthetic_weights(const ModelSpec& spec, uint64_t seed);

}  // namespace tokenhost
