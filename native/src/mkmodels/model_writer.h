// Turning a spec into a GGUF on disk, and proving the file works in the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mkmodels/model_specs.h"

namespace lucerna::mkmodels {

struct WriteResult {
    std::string path;
    uint64_t bytes = 0;
    size_t n_tensors = 0;
};

// Creates the model in memory with deterministic random weights
// (llama_model_init_from_user), then writes it with the engine's model saver plus the
// keys and tensors the saver does not know about. The write is atomic (tmp + rename).
WriteResult write_model(const ModelSpec & spec, const std::string & vocab_dir, const std::string & out_dir,
                        uint64_t seed);

struct VerifyResult {
    bool loaded = false;
    bool generated = false;
    std::string arch;
    int32_t n_vocab = 0;
    std::vector<int32_t> prompt;
    std::vector<int32_t> tokens;  // greedy continuation
    std::string note;             // what happened, for the report (DFlash: why no context)
};

// Loads `path` from disk like a daemon would, and for generating models runs a real
// llama_context: prefill a tokenized prompt, then greedy-decode `n_gen` tokens. A draft
// runs one block against its target when the target's file sits next to it
// (`tokens` then holds the drafted tokens).
VerifyResult verify_model(const ModelSpec & spec, const std::string & path, int n_gen);

}  // namespace lucerna::mkmodels
