// A model's matrices packed once, at load, for the matmul kernels in use (backends/cpu/matmul.hpp:
// pack_weight), so that no product repacks them: the projections, the feed-forward and the output
// (routed MoE experts run in the moe plugin on the file's layout; the embedding is read row by row).
#pragma once

#include "base/model_weights.hpp"

namespace tokenhost {

// Packs w's matrices unless $TOKENHOST_PACK_WEIGHTS is 0 (a model's `pack_weights = false` in a
// manifest does not call it), keeping the copies in w.packed_storage and
// their size in w.packed_bytes, and logs what it did. The copies are memory beside the weights
// themselves, which single-row products (decode) still read: batched steps and prefill gain for that
// memory (110M Q8_0, 8 sequences decoding together: +20-25%; 1.1B Q4_0 prefill +7%). Does nothing when the kernel set has no packed layout for the
// model's types.
void pack_model_weights(ModelWeights& w);

}  // namespace tokenhost
