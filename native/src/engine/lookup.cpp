#include "engine/lookup.h"

#include <algorithm>

namespace lucerna {
namespace {

// The longest match told apart from a shorter one: in a copy of a file the place being
// copied usually matches much further back than any other.
constexpr int32_t kMaxMatch = kMaxLookupMatch;

}  // namespace

void propose_from_context(const std::vector<int32_t> & context, int32_t n_draft, int32_t min_match,
                          std::vector<int32_t> & out) {
    out.clear();
    const auto n = static_cast<int64_t>(context.size());
    if (n_draft <= 0 || n < min_match + 1) {
        return;
    }
    // Every earlier position `end` whose token is the last one: how far back the match
    // goes from there (at most kMaxMatch); the longest wins, the most recent of equals.
    int64_t best_end = -1;
    int64_t best_len = min_match - 1;
    const int32_t last = context[static_cast<size_t>(n - 1)];
    for (int64_t end = n - 2; end >= 0; --end) {
        if (context[static_cast<size_t>(end)] != last) {
            continue;
        }
        int64_t len = 1;
        while (len < kMaxMatch && end - len >= 0 &&
               context[static_cast<size_t>(end - len)] == context[static_cast<size_t>(n - 1 - len)]) {
            ++len;
        }
        if (len > best_len) {
            best_len = len;
            best_end = end;
            if (len == kMaxMatch) {
                break;
            }
        }
    }
    if (best_end < 0) {
        return;
    }
    // The tokens after the match; where they run past the context's end, the proposals
    // themselves continue it (a span that repeats with a period shorter than the block,
    // a loop, is proposed over the whole block).
    out.reserve(static_cast<size_t>(n_draft));
    for (int64_t j = 0; j < n_draft; ++j) {
        const int64_t at = best_end + 1 + j;
        out.push_back(at < n ? context[static_cast<size_t>(at)] : out[static_cast<size_t>(at - n)]);
    }
}

bool LookupBudget::propose_now() {
    if (skip_ > 0) {
        --skip_;
        return false;
    }
    return true;
}

void LookupBudget::update(int32_t proposed, int32_t accepted) {
    if (proposed <= 0) {
        return;
    }
    if (2 * accepted >= proposed) {
        misses_ = 0;
        return;
    }
    skip_ = std::min(kMaxBackoff, 1 << std::min(misses_, 5));
    ++misses_;
}

}  // namespace lucerna
