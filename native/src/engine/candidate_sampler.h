// A tree verify's candidates computed on the draft's device (PROTOCOL.md 5.9,
// --draft-tree; engine/token_tree.h). Each draft row's `width` most likely tokens and
// their probabilities under the whole row's softmax are what the tree is built from.
// Read on the host, that is a softmax over the vocabulary per row: for the 27B shape
// (248,320 tokens) x 15 rows about 33 ms a step on one core, more than a verify step of
// the target costs on an H200. As an engine backend sampler (the engine's backend
// sampling, as the greedy argmax of a chain step), the graph computes them beside the
// logits and only `width` ids and probabilities per row come back.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/token_tree.h"
#include "llama.h"

namespace lucerna {

// The sampler, bare (the check in lucerna-mkmodels drives its backend_apply directly).
// The caller owns it (llama_sampler_free).
llama_sampler * make_candidate_sampler(int32_t width);

// The same wrapped in a sampler chain, the form the engine offloads to a backend
// (llama_context_params::samplers).
llama_sampler * make_candidate_sampler_chain(int32_t width);

// Row `idx` of the last decode: its candidates, best first (ties: the lower id), with
// their log-probabilities. False when the row has none (the context samples nothing on
// its backend, or not for that row): read the logits with top_candidates then.
bool sampled_candidates(llama_context * ctx, int32_t idx, std::vector<TreeCandidate> & out);

}  // namespace lucerna
