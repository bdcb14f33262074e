// Whether the tree verify's device candidates (engine/candidate_sampler.h) are what the
// host computes from the same logits (engine/token_tree.h, top_candidates):
// `lucerna-mkmodels --candidate-check WIDTH [--threads N]`.
//
// Seeded logits rows of the 27B shape's vocabulary go through the sampler's graph on the
// best backend the engine has (a GPU where one is built in, else the CPU), one view per
// row as the engine's sampling graph takes them; each row's ids and log-probabilities are
// compared with the host's.
#pragma once

#include <cstdint>
#include <string>

namespace lucerna::mkmodels {

struct CandidateCheck {
    std::string backend;
    int32_t rows = 0;
    int32_t rows_equal = 0;         // rows whose ids came out in the host's order
    double max_logprob_diff = 0.0;  // largest |device - host| log-probability
};

// Throws std::runtime_error when no backend starts or the graph fails.
CandidateCheck check_candidates(int32_t width, int32_t n_threads);

}  // namespace lucerna::mkmodels
