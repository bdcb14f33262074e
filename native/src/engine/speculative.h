// Speculative decoding in the qwen35 role (PROTOCOL.md 5.9): a proposer (the DFlash
// draft, or the benchmark-only oracle) guesses the next tokens, the target checks them
// all in one decode, and the longest agreeing prefix is committed.
//
// The decode loop that uses it is commands/decode_speculative.h, which says how one
// step goes and why it is lossless.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/draft.h"
#include "engine/oracle.h"

namespace lucerna {

// Counters of one request or of the daemon's life (`stats`).
struct SpecCounters {
    uint64_t steps = 0;     // verify steps that carried at least one proposal
    uint64_t proposed = 0;  // proposals verified
    uint64_t accepted = 0;  // proposals the target agreed with
    double draft_ms = 0.0;  // time in the draft: feature ingest plus block denoising

    void add(const SpecCounters & other) {
        steps += other.steps;
        proposed += other.proposed;
        accepted += other.accepted;
        draft_ms += other.draft_ms;
    }
    // Mean tokens committed per verify step (the accepted proposals plus the target's
    // own pick); 0 before any step.
    double acceptance_length() const {
        return steps == 0 ? 0.0 : 1.0 + static_cast<double>(accepted) / static_cast<double>(steps);
    }
};

// What the daemon speculates with: the draft model (loaded, parked, or none) and the
// oracle. Built before the ready line, so a bad draft or transcript is a startup error.
class Speculator {
public:
    // Loads the oracle's transcripts and the draft (not yet attached to a target).
    // `opts.draft_block_size` must be resolved already. Throws ProtocolError.
    Speculator(const DaemonOptions & opts, int32_t n_vocab);

    bool configured() const { return opts_.speculative(); }
    int32_t block_size() const { return opts_.draft_block_size; }
    // "dflash", "oracle", "dflash+oracle" or "" (the ready line's spec=).
    const char * kind() const;

    // The draft state as park reports it: "absent", "parked" or "ready".
    const char * draft_state() const;
    DflashDraft * draft() { return draft_.get(); }
    const DflashDraft * draft() const { return draft_.get(); }
    OracleProposer * oracle() { return oracle_.get(); }
    uint64_t draft_model_bytes() const { return draft_model_bytes_; }

    // park/unpark draft. unpark attaches to `target` when it is not null; with
    // `target_has_sequence` the draft knows nothing of the sequence the target holds
    // (it is incomplete until the next generate or restore).
    void park_draft();
    void unpark_draft(llama_context * target, bool target_has_sequence);
    // The target's context is about to go / was created.
    void detach();
    void attach(llama_context * target);

    // Whether the next generation decodes speculatively.
    bool active() const { return oracle_ || (draft_ && draft_->attached()); }

    SpecCounters totals;

private:
    const DaemonOptions & opts_;
    std::unique_ptr<OracleProposer> oracle_;
    std::unique_ptr<DflashDraft> draft_;
    uint64_t draft_model_bytes_ = 0;  // as loaded; park does not change it
};

}  // namespace lucerna
