// How the generator runs the engine to check its own output: on the CPU, quietly,
// in a context just big enough for a short prompt and a few tokens. Both the
// generating-model check and the DFlash draft check use these, so they run the
// models the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace lucerna::mkmodels {

// CPU only (the generator must work without a GPU) and no progress dots on stderr.
llama_model_params cpu_model_params();

// A 256-token context on two threads: enough for the test prompt plus a short
// continuation or one draft block, and cheap to create.
llama_context_params small_context_params();

// The fixed prompt every check starts from, tokenized with BOS as a daemon would;
// empty if tokenizing fails.
std::vector<llama_token> tokenize_test_prompt(const llama_vocab * vocab);

// Greedy pick over one row of logits.
llama_token argmax(const float * logits, int32_t n_vocab);

}  // namespace lucerna::mkmodels
