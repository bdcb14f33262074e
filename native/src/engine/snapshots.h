// Snapshot slots (PROTOCOL.md 5.5): host copies of the live sequence's engine state
// (KV cache and, for hybrid models, the recurrent and convolution state), the tokens it
// covers and the logits of its last position. Slots live in host memory, so they survive
// `park`, which frees the context they were taken from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/draft.h"
#include "engine/sequence.h"
#include "llama.h"

namespace lucerna {

struct Snapshot {
    StateBytes state;             // llama_state_seq_get_data of sequence 0
    std::vector<int32_t> tokens;  // the tokens `state` covers, in position order
    std::vector<float> logits;    // logits of the last of them (n_vocab floats)
    // The DFlash draft's KV cache over the same positions (PROTOCOL.md 5.9); empty when
    // no draft was attached and complete when the snapshot was taken.
    std::vector<uint8_t> draft_state;

    uint64_t bytes() const {
        return state.size() + tokens.size() * sizeof(int32_t) + logits.size() * sizeof(float) + draft_state.size();
    }
};

class SnapshotStore {
public:
    explicit SnapshotStore(int32_t n_slots) : slots_(static_cast<size_t>(n_slots)) {}

    int32_t n_slots() const { return static_cast<int32_t>(slots_.size()); }

    // A slot number as the protocol writes it; throws bad_slot for anything that is not
    // a plain decimal in 0 .. n_slots-1.
    int32_t parse_slot(const std::string & word) const;

    // Throws empty_slot.
    const Snapshot & at(int32_t slot) const;
    // nullptr for an empty slot; `slot` must be in range.
    const Snapshot * find(int32_t slot) const { return slots_[static_cast<size_t>(slot)].get(); }
    // The slot's snapshot, kept alive for whoever holds it (a file being written) even
    // if the slot is freed or replaced meanwhile; throws empty_slot.
    std::shared_ptr<const Snapshot> share(int32_t slot) const {
        at(slot);
        return slots_[static_cast<size_t>(slot)];
    }
    void put(int32_t slot, std::unique_ptr<Snapshot> snapshot) {
        slots_[static_cast<size_t>(slot)] = std::move(snapshot);
    }
    // Returns the bytes released; throws empty_slot.
    uint64_t release(int32_t slot);

    uint64_t used() const;
    uint64_t bytes() const;
    // "0:118,5:4096": occupied slots and their token counts, in slot order.
    std::string listing() const;

private:
    std::vector<std::shared_ptr<const Snapshot>> slots_;
};

// Copies the live sequence out of `ctx`. Throws empty_sequence when nothing was decoded,
// snapshot_failed when the engine cannot serialize it (or the host is out of memory).
// With an attached `draft`, its state is copied too.
std::unique_ptr<Snapshot> capture_snapshot(llama_context * ctx, const LiveSequence & live, int32_t n_vocab,
                                           const DflashDraft * draft, llama_seq_id seq = 0);

// For models with sliding-window attention: re-lays the window cache's cells the way
// load_snapshot would lay them out, by saving and reloading that part of the sequence.
// A snapshot leaves out cells that slid out of the window, so a restored cache holds
// the rest at other cell indices than the run it was taken from, and attention over a
// different cell order rounds differently (measured on gemma3 past its 512-token
// window: bit-different logits after a restore). The prefill calls this at every
// chunk-aligned position, in every run, so a restore from an aligned snapshot and an
// uninterrupted run see the same layout. No-op for models without a window.
void canonicalize_window_cells(llama_context * ctx, llama_seq_id seq = 0);

// Replaces the context's sequence with `snapshot`. Throws snapshot_failed (the context
// is then empty and `live` cleared). An attached `draft` takes the snapshot's draft
// state, or, when it has none, starts empty and incomplete: it then drafts from what is
// decoded after the restore only, which lowers acceptance and changes no token.
void load_snapshot(llama_context * ctx, const Snapshot & snapshot, LiveSequence & live, DflashDraft * draft,
                   llama_seq_id seq = 0);

}  // namespace lucerna
