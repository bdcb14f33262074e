// Prompt lookup (PROTOCOL.md 5.9, `lookup=1`): proposals drafted from the context itself,
// with no draft model, for any target. Coding agents re-emit large spans of what their
// context already holds (files, diffs, tool output); where the tokens just committed
// also occur earlier in the context, the tokens that followed them there are a good
// guess for what comes next.
//
// The rule: the longest run of tokens (--lookup-min to kMaxLookupMatch tokens) that
// ends the context and also ends at an earlier position of it, the most recent of
// equally long ones; the proposals are the tokens after that earlier run, as many as
// asked for (continued by themselves past the context's end). Nothing matches: no proposals, and the step decodes the last token alone, as
// autoregressive decoding does.
//
// When it proposes adapts to how the last steps went (LookupBudget). A verify step costs
// more than a one-token step (on CPU a 16-row verify of the chat default about five of
// them, docs/benchmarks.md, "Engine patches on the CPU"), and on text that does not
// repeat its context (prose)
// most matches are short-lived, so after a step that accepted less than half of its
// proposals the next steps decode alone, twice as many after each such step in a row
// (up to kMaxBackoff), and a step that accepted at least half ends the back-off.
#pragma once

#include <cstdint>
#include <vector>

namespace lucerna {

// The longest match told apart from a shorter one, and the default shortest that
// proposes (--lookup-min). A few tokens match all over ordinary text, and a failed
// verify step costs several one-token steps: 6 was the best of 2, 4, 6 and 8 for the
// edit and prose workloads of bin/prompt-lookup-bench, replayed offline (docs/dflash.md,
// "Built: prompt lookup").
constexpr int32_t kMaxLookupMatch = 32;
constexpr int32_t kDefaultLookupMin = 6;

// Up to `n_draft` proposals for the positions after `context` (every committed token,
// the not yet decoded last one included), from a match of at least `min_match` tokens;
// `out` is resized to what it proposes, maybe 0.
void propose_from_context(const std::vector<int32_t> & context, int32_t n_draft, int32_t min_match,
                          std::vector<int32_t> & out);

// The back-off of one generation.
class LookupBudget {
public:
    // Whether this step may propose; counts the step.
    bool propose_now();
    // A verify step proposed `proposed` tokens and the target accepted `accepted`.
    void update(int32_t proposed, int32_t accepted);

private:
    static constexpr int32_t kMaxBackoff = 32;
    int32_t misses_ = 0;  // steps in a row that accepted less than half
    int32_t skip_ = 0;    // steps still to decode without proposals
};

}  // namespace lucerna
