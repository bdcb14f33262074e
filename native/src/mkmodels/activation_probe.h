// How large a model's activations get: `lucerna-mkmodels --probe FILE [--tokens N]`.
//
// Random weights are only useful for timing if a forward pass stays in the range a
// trained model's does: a value past F16's 65504 turns into inf in an F16 KV cache or
// an F16 intermediate of a GPU kernel, and a recurrent state that grows every token
// overflows F32 after a few thousand tokens and makes every logit NaN (issue 14 item 4,
// git show 7a0c96e:docs/benchmarks.md, "Numerically sane 27B test weights"). The probe
// prefills N
// pseudo-random tokens on the CPU with the engine's eval callback and reports, per
// named activation and layer, the largest |x| seen and how many values were not finite.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lucerna::mkmodels {

struct ActivationStat {
    std::string name;   // the graph's name for it, without the layer suffix: l_out, Kcur, ...
    int32_t layer = -1; // -1: not per layer (the logits)
    double max_abs = 0.0;
    uint64_t nonfinite = 0;
    uint64_t count = 0;
};

// Prefills `n_tokens` tokens (seeded, spread over the vocabulary) into a CPU context of
// the model at `path`, `n_ubatch` at a time, and returns one stat per (name, layer) in
// graph order. Throws std::runtime_error when the model does not load or decode fails.
std::vector<ActivationStat> probe_activations(const std::string & path, int32_t n_tokens, int32_t n_ubatch,
                                              int32_t n_threads);

}  // namespace lucerna::mkmodels
