// pflash's `compress` (PROTOCOL.md 5.7): keep the chunks of a prompt the drafter's
// attention marks as important, in their original order.
#pragma once

#include <cstdint>
#include <vector>

namespace lucerna {

struct ChunkSelection {
    int32_t keep_x1000 = 1000;  // share of the prompt to keep, in thousandths, 1..1000
    int32_t chunk = 32;         // tokens per chunk, the unit kept or dropped
    int32_t pool = 13;          // width of the max-pool that smooths token scores
};

// The indices of the kept tokens, ascending. Token scores are max-pooled over a
// centred window of `pool` tokens (so a token next to an important one inherits its
// importance, and a needle keeps its neighbours), a chunk scores the mean of its
// pooled token scores, and the best ceil(n_chunks * keep_x1000 / 1000) chunks are
// kept, the first and the last always among them (the instructions that open a
// prompt and the question that ends it). Ties go to the earlier chunk, so the result
// depends on the scores alone.
std::vector<int32_t> select_kept_tokens(const std::vector<float> & scores, const ChunkSelection & selection);

}  // namespace lucerna
