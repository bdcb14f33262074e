// How much the end of a prompt attends to each of its tokens, as the drafter sees it:
// the importance score behind pflash's `compress` (PROTOCOL.md 5.7).
//
// How. The prompt is prefilled into a scoring context of its own, except its last
// `lookahead` tokens; those are then decoded as one final micro-batch while an engine
// eval callback (llama_context_params.cb_eval) reads each layer's attention
// probabilities, the "kq_soft_max-<layer>" tensors of the engine's graph. That tensor
// is only lookahead x n_kv x n_head, so a 128K-token prompt never materialises an
// N x N matrix; and the probabilities are the engine's own (mask, soft-capping, sinks,
// GQA), not a re-derivation. The catch: flash attention never forms the probabilities.
// So the prompt is prefilled with flash attention, where the engine has it for the model,
// and only the final micro-batch is built without (attention_scores.cpp:
// set_flash_attn); a prefill that formed ubatch x n_kv blocks per layer made compress
// quadratic in memory traffic (on an H200, PFlash's first token at 64K came after 21.3 s;
// 6.0 s with this: git show 7a0c96e:docs/benchmarks.md, "Issue 7"). Where the engine
// has no flash attention, the
// whole scoring context runs without it, its ubatch sized to keep that block bounded.
//
// Segments. One pass costs a prefill of the whole prompt, whose attention grows with
// the square of its length: at 128K tokens that was 8 of the 0.6B drafter's 12.9 s on
// an H200 (git show 7a0c96e:docs/benchmarks.md; segments: docs/benchmarks.md, "PFlash").
// With `segment=N` the prompt's body is scored N tokens
// at a time: each pass clears the cache, prefills the prompt's first few tokens (the
// attention sinks) and one segment, then decodes the lookahead
// queries, which score that segment's tokens. Positions in a pass are consecutive (the
// engine accepts no gaps in a sequence), so each pass reads like a short prompt of sink,
// segment and queries. The prefill is then linear in the prompt's length; what it gives
// up is attention from one segment to another and the true distance from the queries
// back to a segment. A prompt no
// longer than one segment is scored in one pass, exactly as without segments.
//
// Why a context of its own rather than the daemon's: compress must not disturb the
// live sequence that generate, snapshot and restore work on, and the main context
// keeps flash attention for generation. It lives only for one call.
//
// Which layers count. Column j of a layer's probabilities is KV cell j. In a fresh
// cache filled in order, cell j holds the j-th token the pass prefilled whenever the
// layer's cache holds the whole pass; a sliding-window layer whose cache is smaller has recycled cells and
// sees only the window anyway, so it is left out (on Gemma 3 the global layers score,
// the local ones do not, unless the prompt fits in their window).
//
// Pooling. For every counted layer and head, the probability mass the lookahead
// queries put on token j is averaged over the queries; a token's score is the largest
// of those averages over layers and heads. The maximum, not the mean, because the
// heads that retrieve are few and averaging dilutes their peak with the heads that
// attend to the first token or to recent ones. Measured on Gemma 3 270M needle
// haystacks (1.4K tokens, 10 needle positions) both keep the needle down to a keep
// ratio of 0.07; at 0.05 (a single free chunk) the maximum kept it 5 times, the mean 4.
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace lucerna {

struct AttentionScores {
    std::vector<float> per_token;  // one score per prompt token, in [0, 1]
    int32_t layers_used = 0;       // layers whose probabilities were counted
    int32_t n_query = 0;           // lookahead queries actually used (<= prompt length)
    int32_t n_segments = 1;        // passes the prompt was scored in
    bool flash_prefill = false;    // the prompt was prefilled with flash attention
};

// Throws ProtocolError: context_failed if the scoring context cannot be created,
// decode_failed if a decode step fails. `lookahead` >= 1; `prompt` non-empty, ids
// already checked against the vocabulary. `segment` > 0 scores the prompt in segments
// of that many tokens (see above); 0 scores it in one pass.
AttentionScores score_prompt_attention(llama_model * model, const std::vector<int32_t> & prompt, int32_t lookahead,
                                       int32_t segment, int32_t n_threads);

}  // namespace lucerna
