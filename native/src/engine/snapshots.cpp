// Snapshot slots (PROTOCOL.md 5.5); the commands that use them are in commands/snapshot.cpp.
//
// State goes through llama_state_seq_get_data / llama_state_seq_set_data on one sequence:
// the KV cells of the sequence plus, for hybrid models, its recurrent state. The logits
// of the last position are not part of the engine's sequence state, so they are copied
// beside it: a restore whose ids equal the slot's tokens samples from them.
#include "engine/snapshots.h"

#include <algorithm>
#include <new>
#include <optional>

#include "engine/engine.h"
#include "engine/log.h"
#include "wire/errors.h"
#include "wire/numbers.h"

namespace lucerna {

int32_t SnapshotStore::parse_slot(const std::string & word) const {
    const std::string range = "0.." + std::to_string(n_slots() - 1);
    // An integer of the number grammar (wire/numbers.h) without a sign: a slot is never
    // negative, and "-1" is not a number in the range rather than outside it.
    const std::optional<int64_t> slot = word.rfind('-', 0) == 0 ? std::nullopt : parse_integer(word);
    if (!slot) {
        throw ProtocolError(ErrorCode::kBadSlot, "slot '" + word + "' is not a number in " + range);
    }
    if (*slot >= n_slots()) {
        throw ProtocolError(ErrorCode::kBadSlot, "slot " + word + " is outside " + range);
    }
    return static_cast<int32_t>(*slot);
}

const Snapshot & SnapshotStore::at(int32_t slot) const {
    const auto & snapshot = slots_[static_cast<size_t>(slot)];
    if (!snapshot) {
        throw ProtocolError(ErrorCode::kEmptySlot, "slot " + std::to_string(slot) + " holds no snapshot");
    }
    return *snapshot;
}

uint64_t SnapshotStore::release(int32_t slot) {
    const uint64_t bytes = at(slot).bytes();
    slots_[static_cast<size_t>(slot)].reset();
    return bytes;
}

uint64_t SnapshotStore::used() const {
    return static_cast<uint64_t>(std::count_if(slots_.begin(), slots_.end(), [](const auto & s) { return !!s; }));
}

uint64_t SnapshotStore::bytes() const {
    uint64_t total = 0;
    for (const auto & snapshot : slots_) {
        total += snapshot ? snapshot->bytes() : 0;
    }
    return total;
}

std::string SnapshotStore::listing() const {
    std::string out;
    for (size_t slot = 0; slot < slots_.size(); ++slot) {
        if (slots_[slot]) {
            out += (out.empty() ? "" : ",") + std::to_string(slot) + ":" + std::to_string(slots_[slot]->tokens.size());
        }
    }
    return out;
}

std::unique_ptr<Snapshot> capture_snapshot(llama_context * ctx, const LiveSequence & live, int32_t n_vocab,
                                           const DflashDraft * draft, llama_seq_id seq) {
    if (live.empty()) {
        throw ProtocolError(ErrorCode::kEmptySequence, "nothing has been decoded yet; run generate first");
    }
    if (!live.has_logits()) {
        // Cut back by a generate that was cancelled before its prefill (PROTOCOL.md 5.10).
        throw ProtocolError(ErrorCode::kEmptySequence,
                            "the sequence was cut back and not decoded since; run generate first");
    }
    try {
        auto snapshot = std::make_unique<Snapshot>();
        const size_t size = llama_state_seq_get_size(ctx, seq);
        snapshot->state.resize(size);
        if (size == 0 || llama_state_seq_get_data(ctx, snapshot->state.data(), size, seq) != size) {
            throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not save the sequence state");
        }
        snapshot->tokens = live.tokens();
        const float * logits = live.last_logits(ctx);
        snapshot->logits.assign(logits, logits + n_vocab);
        if (draft != nullptr && draft->attached()) {
            snapshot->draft_state = draft->save_state(seq);
        }
        return snapshot;
    } catch (const std::bad_alloc &) {
        throw ProtocolError(ErrorCode::kSnapshotFailed, "out of host memory for the snapshot");
    }
}

void load_snapshot(llama_context * ctx, const Snapshot & snapshot, LiveSequence & live, DflashDraft * draft,
                   llama_seq_id seq) {
    // From an empty cache the cells land where an uninterrupted run put them (cell i holds
    // position i), which is part of what makes a restored run bit-identical.
    clear_sequence(ctx, seq);
    live.clear();
    if (llama_state_seq_set_data(ctx, snapshot.state.data(), snapshot.state.size(), seq) == 0) {
        clear_sequence(ctx, seq);
        throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not load the sequence state");
    }
    live.restored(snapshot.tokens, snapshot.logits);
    if (draft != nullptr && draft->attached() && !draft->load_state(snapshot.draft_state, seq)) {
        log_line("restore: the snapshot holds no draft state; the draft starts from the restored position");
    }
}

void canonicalize_window_cells(llama_context * ctx, llama_seq_id seq) {
    const llama_model * model = llama_get_model(ctx);
    if (llama_model_n_swa(model) <= 0) {
        return;
    }
    // PARTIAL_ONLY is just the window cache of a plain SWA model, but the recurrent state
    // of a hybrid one: there the whole sequence goes round, as a snapshot would.
    const bool hybrid = llama_model_is_hybrid(model);
    const llama_state_seq_flags flags = hybrid ? LLAMA_STATE_SEQ_FLAGS_NONE : LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
    std::vector<uint8_t> state(llama_state_seq_get_size_ext(ctx, seq, flags));
    if (llama_state_seq_get_data_ext(ctx, state.data(), state.size(), seq, flags) != state.size()) {
        throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not save the window cache");
    }
    if (hybrid) {
        clear_sequence(ctx, seq);
    }
    if (llama_state_seq_set_data_ext(ctx, state.data(), state.size(), seq, flags) == 0) {
        throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not reload the window cache");
    }
}

}  // namespace lucerna
