// Speculative decoding in the qwen35 role (PROTOCOL.md 5.9): a proposer (the DFlash
// draft, or the benchmark-only oracle) guesses the next tokens, the target checks them
// all in one decode, and the longest agreeing prefix is committed.
//
// The decode loop that uses it is commands/decode_speculative.h, which says how one
// step goes and why it is lossless.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/draft.h"
#include "engine/lookup.h"
#include "engine/oracle.h"

namespace lucerna {

// Counters of one request or of the daemon's life (`stats`).
struct SpecCounters {
    uint64_t steps = 0;     // verify steps that carried at least one proposal
    uint64_t proposed = 0;  // proposals verified
    uint64_t accepted = 0;  // proposals the target agreed with
    double draft_ms = 0.0;  // time in the draft: feature ingest plus block denoising
    uint64_t tree_steps = 0;  // of `steps`, those verified as a tree (--draft-tree)

    void add(const SpecCounters & other) {
        steps += other.steps;
        tree_steps += other.tree_steps;
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

// Which proposers one generation runs (all off for a request with logprobs, which
// decodes without proposals, and for lookup=0 on a daemon with nothing else).
struct SpecChoice {
    bool draft = false;
    bool oracle = false;
    bool lookup = false;
    // The draft's or the oracle's steps are tree verify steps (--draft-tree); lookup's
    // stay chains.
    bool tree = false;

    bool any() const { return draft || oracle || lookup; }
    // The reply's spec=: "dflash", "oracle", "lookup" joined by '+', or "none".
    std::string name() const;
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
    // The ready line's spec=: "dflash", "oracle" and "lookup" joined by '+' in that
    // order ("dflash+oracle", "dflash+lookup", ...), or "" when not speculating.
    std::string kind() const;
    DaemonOptions::Lookup lookup() const { return opts_.lookup; }
    // --draft-tree's budget (0: chain verify) and branches.
    int32_t tree_budget() const { return opts_.draft_tree; }
    int32_t tree_branches() const { return opts_.draft_tree_branches; }

    // The draft state as park reports it: "absent", "parked" or "ready".
    const char * draft_state() const;
    DflashDraft * draft() { return draft_.get(); }
    const DflashDraft * draft() const { return draft_.get(); }
    // The draft when it is attached to the target (null when absent, parked or detached).
    DflashDraft * attached_draft() { return draft_ && draft_->attached() ? draft_.get() : nullptr; }
    // Sequence `seq`'s oracle (each follows its own generation's transcript); null
    // without --draft-oracle.
    OracleProposer * oracle(int32_t seq = 0) {
        return oracles_.empty() ? nullptr : oracles_[static_cast<size_t>(seq)].get();
    }
    uint64_t draft_model_bytes() const { return draft_model_bytes_; }

    // park/unpark draft. unpark attaches to `target` when it is not null; with
    // `target_has_sequence` the draft knows nothing of the sequence the target holds
    // (it is incomplete until the next generate or restore).
    void park_draft();
    void unpark_draft(llama_context * target, bool target_has_sequence);
    // The target's context is about to go / was created.
    void detach();
    void attach(llama_context * target);

    // Whether the next generation runs the speculative loop (decode_speculative): it
    // then decides per request which proposers run (choose).
    bool active() const { return !oracles_.empty() || (draft_ && draft_->attached()) || opts_.lookup != DaemonOptions::Lookup::kOff; }
    // The proposers of a request that asked lookup=0|1 (-1: the daemon's default) and
    // may (`propose`: no logprobs) or may not have proposals.
    SpecChoice choose(int32_t lookup, bool propose) const;

    SpecCounters totals;

private:
    const DaemonOptions & opts_;
    std::vector<std::unique_ptr<OracleProposer>> oracles_;  // one per sequence
    std::unique_ptr<DflashDraft> draft_;
    uint64_t draft_model_bytes_ = 0;  // as loaded; park does not change it
};

}  // namespace lucerna
