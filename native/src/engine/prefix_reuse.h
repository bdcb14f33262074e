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
    // kSequence: shared from another sequence of the context (share_prefix).
    enum class Source { kNone, kLive, kCheckpoint, kSlot, kSequence };
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

// What another sequence `other` of the context (the engine's sequence `other_seq`) can
// give `prompt`: the longest prefix, at most `limit` tokens, that it holds exactly as a
// solo prefill of `prompt` would leave it: any common prefix on an attention-only model
// (short of the whole prompt, whose last token is prefilled for its logits), else one
// of its checkpoints (the recurrent state or window cache of that position). n_tokens 0
// when nothing; `slot` is the checkpoint's index, -1 for none.
ReusedPrefix prefix_offer(const llama_model * model, const LiveSequence & other, const std::vector<int32_t> & prompt,
                          int32_t limit);

// Makes sequence `seq` (its live sequence `live`) hold the prefix `offer` of `other`
// (prefix_offer): the attention cells are shared (llama_memory_seq_cp: one copy of the
// KV for both), the uncuttable part is loaded from the checkpoint into `seq`'s own
// recurrent state or window cache. Throws snapshot_failed (`seq` is then empty).
void share_prefix(llama_context * ctx, LiveSequence & live, llama_seq_id seq, const LiveSequence & other,
                  llama_seq_id other_seq, const ReusedPrefix & offer);

// Copies the uncuttable part of the live sequence's state into a new checkpoint at its
// current length, with the logits of its last position. No-op for models that need none.
void capture_checkpoint(llama_context * ctx, LiveSequence & live, int32_t n_vocab, llama_seq_id seq = 0);

// Host memory the checkpoints of all `sequences` hold together.
uint64_t checkpoint_bytes(const std::vector<LiveSequence> & sequences);

// Keeps the checkpoints of all `sequences` within `budget` bytes together (0: no bound),
// right after `taken` took one: drops the oldest checkpoint of the least recently used
// sequence that has any, again until they fit, `taken`'s last of all and never the one
// it just took (which alone may exceed the budget). A sequence idle the longest
// continues from its live state all the same; what it loses is rolling back to its
// earlier prompts, and sharing them with other sequences (9.7). The checkpoints dropped.
uint64_t bound_checkpoints(std::vector<LiveSequence> & sequences, uint64_t budget, const LiveSequence & taken);

// Makes the host memory of one checkpoint per sequence before the first request, where
// checkpoints have one size (a recurrent or hybrid model's state; a window cache's
// varies). On a GPU that memory is page-locked, and each sequence's first checkpoint
// would otherwise lock a new block (150 MB on the 27B shape) on its way to its first
// token: the fourth round on the H200 traced 43-92 ms of host time to that, and the
// fifth round's admission steps spent 53-66 ms in gaps (git show
// 7a0c96e:docs/benchmarks.md, "Checkpoint memory made at startup"). The size
// is read off a one-token decode on sequence 0, which is emptied again. Where that
// decode or the memory fails, it logs why and makes nothing: states then take memory as
// they come. Only where state_memory_made_ahead() (engine/state_memory.h): a CPU daemon,
// the GPU model's tokenizer among them, would otherwise pay a whole forward at startup
// for memory that gains nothing by being made early.
void reserve_checkpoint_memory(llama_context * ctx, int32_t n_sequences);

}  // namespace lucerna
