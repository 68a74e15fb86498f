// A model's matrices packed once, at load, for the matmul kernels in use (backends/cpu/matmul.hpp:
// pack_weight), so that no product repacks them: the projections, the feed-forward and the output
// (routed MoE experts run in the moe plugin on the file's layout; the embedding is read row by row).
#pragma once

#include "base/model_weights.hpp"

namespace tokenhost {

// Packs w's matrices unless $TOKENHOST_PACK_WEIGHTS is 0 (a model's `pack_weights = false` in a
// manifest does not call it), keeping the copies, in one allocation, in w.packed_storage and
// their size in w.packed_bytes, and logs what it did. Every product of a packed matrix reads the copy
// (decode 5-15% faster, 5 rows 1.3x, in-cache products 1.25-1.7x on Zen 5; batched 110M Q8_0 +20-25%,
// 1.1B Q4_0 prefill +7%); the weights themselves, a file's mapped pages, are then read only by their
// packing and by row lookups (a tied embedding), and the kernel may reclaim the rest. Does nothing when the kernel set has no packed layout
// for the model's types.
void pack_model_weights(ModelWeights& w);

}  // namespace tokenhost
