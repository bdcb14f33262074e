// The test models Lucerna generates: one small random-weight GGUF per architecture
// the daemons serve, built on the engine's own metadata keys so that each file is
// exactly what a converter would have produced for a (tiny) real model.
#pragma once

#include <string>
#include <vector>

#include "ggml-cpp.h"

namespace lucerna::mkmodels {

// Bump when the bytes the generator writes change (shapes, keys, init, vocab choice):
// daemons/testmodels.py regenerates the cache when it differs.
// 2: negative recurrent decay (ssm_a). 3: the 27B target's residual-branch, embedding
// and head scales (bench_shapes.cpp); the test models' bytes are those of 2.
inline constexpr int kGeneratorVersion = 3;

struct ModelSpec {
    std::string name;           // "qwen35": key in daemons/testmodels.py, file <name>.gguf
    std::string description;    // one line for --list and progress
    std::string vocab_gguf;     // file under <engine src>/models/ whose tokenizer.* keys we copy
    std::vector<std::string> omit_tensors;  // tensors we leave out of the file (tied/shared)
    bool generates = true;      // false: the model cannot run on its own (the DFlash draft)
    std::string draft_target;   // for drafts: the spec name of the target model they run with
    // Every tensor F32, matmul weights included. The engine's CPU kernels round a batched
    // and a single-token matmul of F16 weights differently (activations converted to F16
    // on one path, not the other: ~1e-3 on the logits), so a test that compares a
    // speculative verify batch token for token with autoregressive decoding needs F32.
    bool f32_weights = false;
    // Written only when named with --only: not part of the default set the test suite
    // caches (daemons/testmodels.py), for tests that build it themselves.
    bool on_request = false;
};

const std::vector<ModelSpec> & model_specs();

// Builds the metadata of `spec` (hyperparameters + tokenizer) into a fresh gguf context.
gguf_context_ptr build_metadata(const ModelSpec & spec, const std::string & vocab_dir);

// Whether a tensor of the given name and rank is stored as F16 (matmul weights and the
// embedding table); everything else stays F32 as the engine's converters do.
bool store_as_f16(const std::string & name, int n_dims);

}  // namespace lucerna::mkmodels
