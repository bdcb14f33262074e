// Full-size random-weight models for GPU benchmarks (`lucerna-mkmodels --shape NAME`),
// written straight into their quantized types: no F16 intermediate (54 GB for the 27B
// target), so they can be made on the benchmark machine itself instead of carried there.
//
//   qwen36-27b  the Qwen3.6-27B target: qwen35 arch, 64 layers (every 4th full
//               attention, the rest Gated DeltaNet), hidden 5120, FFN 17408, 24 query /
//               4 KV heads of 256, DeltaNet conv 4 / state 128 / 16 key / 48 value heads,
//               vocabulary 248320, untied output. Default type mix: Q4_K_M.
//   dflash-27b  a DFlash draft of the published Qwen3.5/3.6-27B draft's shape: 5 layers,
//               hidden 5120, FFN 17408, 32 query / 8 KV heads of 128, block 16, mask id
//               248070, reading target layers 2, 17, 32, 47, 62 (the inputs of layers
//               after HF's target_layer_ids 1, 16, 31, 46, 61); shares the target's
//               embeddings and head. Default type: Q8_0.
//   qwen3-0.6b  the PFlash drafter: Qwen3-0.6B's shape (qwen3 arch, 28 layers, hidden
//               1024, FFN 3072, 16 query / 8 KV heads of 128, tied embeddings), its own
//               151936-token vocabulary. Default type: Q8_0.
//
// The 27B shapes take the engine's Qwen tokenizer (151936 tokens) padded with unused
// tokens to 248320 rows, so the embedding table and LM head have the real size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lucerna::mkmodels {

struct ShapeOptions {
    std::string shape;         // qwen36-27b | dflash-27b | qwen3-0.6b
    std::string out_dir;
    std::string vocab_dir;
    uint64_t seed = 42;
    int32_t target_layers = 64;  // --layers: a scaled-down target (every 4th layer full attention)
    std::string ftype;           // "": the shape's default; q4_k_m, q8_0, f16, bf16
    int32_t threads = 0;         // 0: hardware concurrency
    // > 0: the pieces (about a million values each) of one kind share this many random
    // ones, encoded once (minutes saved on the 27B target; timing is the same).
    int32_t piece_pool = 0;
};

// The shape names, one line each for --list.
std::vector<std::pair<std::string, std::string>> bench_shapes();

// Writes <out_dir>/<shape>[-<layers>l].gguf; returns its path. Progress goes to stderr.
// Throws std::runtime_error.
std::string write_bench_shape(const ShapeOptions & opts);

}  // namespace lucerna::mkmodels
