// The context's one live sequence as the daemon tracks it (PROTOCOL.md 5.5): the tokens
// whose state the context holds, in position order, and where the logits of the last
// of them are. A snapshot copies exactly this; a restore puts it back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "llama.h"

namespace lucerna {

class LiveSequence {
public:
    const std::vector<int32_t> & tokens() const { return tokens_; }
    bool empty() const { return tokens_.empty(); }
    int32_t size() const { return static_cast<int32_t>(tokens_.size()); }

    // A decode of `n` tokens ran and they stay in the context; the current logits are
    // the engine's output row `logits_row` (-1: the decode's last output). A speculative
    // step keeps fewer rows than it decoded, so its current logits are an earlier row.
    void decoded(const int32_t * tokens, size_t n, int32_t logits_row = -1) {
        tokens_.insert(tokens_.end(), tokens, tokens + n);
        restored_logits_.clear();
        logits_row_ = logits_row;
    }

    // A snapshot was loaded: the context holds its state, but the engine's logits buffer
    // still holds whatever the last decode produced, so the snapshot's logits are kept here
    // until the next decode.
    void restored(const std::vector<int32_t> & tokens, const std::vector<float> & logits) {
        tokens_ = tokens;
        restored_logits_ = logits;
    }

    // The context was cleared, replaced, or left in an unknown state by a failure.
    void clear() {
        tokens_.clear();
        restored_logits_.clear();
    }

    // Logits of the last position; nullptr when nothing was decoded.
    const float * last_logits(llama_context * ctx) const {
        if (tokens_.empty()) {
            return nullptr;
        }
        return restored_logits_.empty() ? llama_get_logits_ith(ctx, logits_row_) : restored_logits_.data();
    }

private:
    std::vector<int32_t> tokens_;
    std::vector<float> restored_logits_;  // empty: the logits are the context's
    int32_t logits_row_ = -1;
};

}  // namespace lucerna
