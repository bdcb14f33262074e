// The context's one live sequence as the daemon tracks it (PROTOCOL.md 5.5): the tokens
// whose state the context holds, in position order, and where the logits of the last
// of them are. A snapshot copies exactly this; a restore puts it back.
//
// It also keeps checkpoints (PROTOCOL.md 5.10): copies of the part of the state that
// cannot be cut back to an earlier position (the recurrent state of a hybrid model, the
// window cache of a sliding-window one) at chosen prefill positions, so that a later
// `generate` sharing only a prefix of the sequence can roll back to one of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/state_memory.h"
#include "llama.h"

namespace lucerna {

// The uncuttable part of the sequence's state after its first `n_tokens` tokens
// (llama_state_seq_get_data_ext with LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), and the logits
// of that last position, so that a prompt of exactly `n_tokens` needs no prefill.
struct Checkpoint {
    int32_t n_tokens = 0;
    StateBytes state;
    std::vector<float> logits;

    uint64_t bytes() const { return state.size() + logits.size() * sizeof(float); }
};

class LiveSequence {
public:
    const std::vector<int32_t> & tokens() const { return tokens_; }
    bool empty() const { return tokens_.empty(); }
    int32_t size() const { return static_cast<int32_t>(tokens_.size()); }

    // A decode of `n` tokens ran and they stay in the context; the current logits are
    // the engine's output row `logits_row` (-1: the decode's last output). A speculative
    // step keeps fewer rows than it decoded, so its current logits are an earlier row.
    void decoded(const int32_t * tokens, size_t n, int32_t logits_row = -1) {
        last_used_ = ++use_clock_;
        tokens_.insert(tokens_.end(), tokens, tokens + n);
        restored_logits_.clear();
        logits_row_ = logits_row;
        logits_known_ = true;
    }

    // A snapshot was loaded: the context holds its state, but the engine's logits buffer
    // still holds whatever the last decode produced, so the snapshot's logits are kept here
    // until the next decode.
    void restored(const std::vector<int32_t> & tokens, const std::vector<float> & logits) {
        last_used_ = ++use_clock_;
        tokens_ = tokens;
        restored_logits_ = logits;
        logits_known_ = !logits.empty();
    }

    // Copies the current logits out of the engine, whose output buffer the next decode
    // of any sequence overwrites (PROTOCOL.md 9: lanes take turns in one context). No-op
    // when they are unknown or already a copy.
    void keep_logits(llama_context * ctx, int32_t n_vocab) {
        if (!has_logits() || !restored_logits_.empty()) {
            return;
        }
        const float * logits = llama_get_logits_ith(ctx, logits_row_);
        restored_logits_.assign(logits, logits + n_vocab);
    }

    // The context was cleared, replaced, or left in an unknown state by a failure.
    void clear() {
        tokens_.clear();
        restored_logits_.clear();
        checkpoints_.clear();
        logits_known_ = false;
    }

    // The context was cut back to its first `n` tokens (n < size()). The current logits
    // are then unknown until the next decode, or given (a checkpoint's).
    void truncated(int32_t n, const std::vector<float> & logits = {}) {
        tokens_.resize(static_cast<size_t>(n));
        restored_logits_ = logits;
        logits_known_ = !logits.empty();
        drop_checkpoints_after(n);
    }

    // Checkpoints, ordered by position; at most kMaxCheckpoints, the oldest positions go
    // first when there are more (a conversation moves forward).
    static constexpr size_t kMaxCheckpoints = 16;
    const std::vector<Checkpoint> & checkpoints() const { return checkpoints_; }
    void add_checkpoint(Checkpoint checkpoint) {
        drop_checkpoints_after(checkpoint.n_tokens - 1);
        checkpoints_.push_back(std::move(checkpoint));
        if (checkpoints_.size() > kMaxCheckpoints) {
            drop_oldest_checkpoint();
        }
    }
    // Drops the checkpoint at the oldest position (there must be one); the bytes it held.
    uint64_t drop_oldest_checkpoint() {
        const uint64_t bytes = checkpoints_.front().bytes();
        checkpoints_.erase(checkpoints_.begin());
        return bytes;
    }
    // When this sequence last decoded or was restored, on a clock all sequences share:
    // the larger, the more recently.
    uint64_t last_used() const { return last_used_; }
    uint64_t checkpoint_bytes() const {
        uint64_t total = 0;
        for (const auto & c : checkpoints_) {
            total += c.bytes();
        }
        return total;
    }

    // Whether the logits of the last position are known: not after a cut with no
    // checkpoint's logits, until the next decode.
    bool has_logits() const { return !tokens_.empty() && logits_known_; }

    // The output row of the context's last decode that holds the last position's logits;
    // -1 when they are not known or came from a snapshot (restored_logits_).
    int32_t context_row() const { return has_logits() && restored_logits_.empty() ? logits_row_ : -1; }

    // Logits of the last position; nullptr when they are not known (has_logits).
    const float * last_logits(llama_context * ctx) const {
        if (!has_logits()) {
            return nullptr;
        }
        return restored_logits_.empty() ? llama_get_logits_ith(ctx, logits_row_) : restored_logits_.data();
    }

private:
    void drop_checkpoints_after(int32_t n) {
        checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                          [n](const Checkpoint & c) { return c.n_tokens > n; }),
                           checkpoints_.end());
    }

    std::vector<int32_t> tokens_;
    std::vector<Checkpoint> checkpoints_;
    std::vector<float> restored_logits_;  // empty: the logits are the context's
    uint64_t last_used_ = 0;
    static inline uint64_t use_clock_ = 0;  // the daemon's sequences run on one thread
    int32_t logits_row_ = -1;
    bool logits_known_ = false;
};

}  // namespace lucerna
