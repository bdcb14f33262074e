// Prefix reuse (PROTOCOL.md 5.10): a `generate` whose prompt starts with tokens whose
// state the daemon already holds (in the live sequence, one of its checkpoints, or a
// snapshot slot) prefills only the rest.
//
// What can be reused depends on the model's memory. An attention-only model's KV cache
// can be cut back to any position. A hybrid model's recurrent state (Gated DeltaNet,
// convolution) only exists for the newest position, and a sliding-window cache has
// dropped what slid out of the window, so those are cut back only to a checkpoint: a
// copy of that uncuttable part taken during an earlier prefill. Extending the whole
// live sequence needs no cut at all and works for every model.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/draft.h"
#include "engine/sequence.h"
#include "engine/snapshots.h"
#include "llama.h"

namespace lucerna {

// Where the reused prefix came from; `slot` is set for kSlot.
struct ReusedPrefix {
    enum class Source { kNone, kLive, kCheckpoint, kSlot };
    Source source = Source::kNone;
    int32_t n_tokens = 0;
    int32_t slot = -1;
};

// Whether the model's state has a part that cannot be cut back to an earlier position,
// so that reuse short of the whole live sequence needs a checkpoint.
bool needs_checkpoints(const llama_model * model);

// Leaves the context holding the longest prefix of `prompt`, at most `limit` tokens, it
// can reuse exactly (see above) and `live`, `draft` matching it; or, when nothing is
// reusable, empty. A prefix of all of `prompt` is taken only where the logits of its
// last position are known, so that generation can start from them. Throws
// snapshot_failed (the context is then empty).
ReusedPrefix reuse_prefix(llama_context * ctx, LiveSequence & live, const SnapshotStore & slots,
                          const std::vector<int32_t> & prompt, int32_t limit, DflashDraft * draft,
                          llama_seq_id seq = 0);

// Copies the uncuttable part of the live sequence's state into a new checkpoint at its
// current length, with the logits of its last position. No-op for models that need none.
void capture_checkpoint(llama_context * ctx, LiveSequence & live, int32_t n_vocab, llama_seq_id seq = 0);

}  // namespace lucerna
