// Speculative decoding in the qwen35 role (PROTOCOL.md 5.9): a proposer (the DFlash
// draft, or the benchmark-only oracle) guesses the next tokens, the target checks them
// all in one decode, and the longest agreeing prefix is committed.
//
// One step, with `last` the picked token the target has not decoded yet, at position n:
//   1. propose d1..dk (k <= block - 1, and no more than the request may still write);
//   2. decode [last, d1..dk] at n..n+k in one batch with logits for every row;
//   3. pick from row 0, 1, ... with the request's own TokenPicker, exactly as the
//      autoregressive loop picks from each step's logits; each pick is written at once;
//      continue to row i+1 only while the pick at row i equals d(i+1);
//   4. keep positions n..n+i (rows whose tokens are now committed) and roll the rest
//      back: llama_memory_seq_rm, which drops the KV cells and, for the hybrid qwen35
//      target, points the Gated DeltaNet and conv state at the copy the engine kept for
//      position n+i (n_rs_seq, see engine/engine.cpp); the pick at row i is the new `last`.
//   5. the draft ingests the target's captured features for n..n+i.
//
// Why it is lossless. Every committed token is one pick of the picker, in order, from
// target logits conditioned on exactly the committed prefix: greedy picks the argmax
// the autoregressive loop would pick, and sampling draws once per committed token from
// the same chain (penalties, top-k/p, min-p, temperature, grammar) with the same seeded
// generator, so the output distribution is the target's, and a seed reproduces the run.
// (This is verification by resampling. For a draft that proposes one token per position,
// as a greedy draft does, it accepts a proposal with probability p_target(d), the same
// as rejection sampling with a one-hot draft distribution would.) The proposals only
// decide how many positions one target decode covers. Numerically, a row of a verify
// batch is computed in a batch of another size than an autoregressive step (CPU matmul
// and the chunked Gated DeltaNet kernel round differently), so logits agree to float
// rounding, not bit for bit; the tests check that the tokens agree.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/draft.h"
#include "engine/oracle.h"

namespace lucerna {

struct Session;
class TokenEmitter;
class TokenPicker;
class Batch;

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

// Decodes from the live sequence (prompt prefilled, its logits current) until the
// emitter says stop, speculatively. Adds this request's counters to `counters`.
void decode_speculative(Session & session, TokenPicker & picker, TokenEmitter & emitter, Batch & batch,
                        SpecCounters & counters);

}  // namespace lucerna
