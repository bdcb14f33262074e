// The GPU's quantized matmuls at the batch sizes continuous batching runs (1 to 8
// columns, and 16 for MMQ), against the CPU backend and timed:
// `lucerna-mkmodels --gpu-matmul-check TYPE[,TYPE...]`.
//
// Correctness: seeded weights of TYPE (1000 rows, a partial last tile) times 1..8 and 16
// activation columns on the first GPU and on the CPU; the normalized mean squared error
// of the GPU's products against the CPU's (test-backend-ops's measure, its bound 5e-4),
// and whether each column of a batched product equals, bit for bit, the product of that
// column alone (a batch-invariant kernel).
//
// Timing: the shapes the Qwen3.6-27B target multiplies by (engine patch 0203's measure),
// each a chain of distinct weight copies too large together for the L2 cache, so each
// product reads its weights from memory; the least time per product over 5 runs, and the
// weight bytes over that time.
//
// Which kernel runs is the engine's choice; in the environment GGML_CUDA_MMVQ_MMA=0 turns
// patch 0203's kernel off (what ran before) and =1 gives it every product it can serve.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lucerna::mkmodels {

struct GpuMatmulAccuracy {
    std::string type;
    int64_t k = 0;
    int64_t n = 0;
    int64_t cols = 0;
    double nmse = 0.0;       // against the CPU backend
    bool invariant = false;  // every column equal to its 1-column product
};

struct GpuMatmulTiming {
    std::string type;
    int64_t k = 0;
    int64_t n = 0;
    int64_t cols = 0;
    double us = 0.0;    // per product
    double gbps = 0.0;  // weight bytes read per second, 1e9
};

struct GpuMatmulCheck {
    std::string backend;
    std::vector<GpuMatmulAccuracy> accuracy;
    std::vector<GpuMatmulTiming> timing;
};

// Throws std::runtime_error when no GPU backend starts, for a type name the engine does
// not know, or when a graph fails.
GpuMatmulCheck check_gpu_matmul(const std::vector<std::string> & type_names, int32_t n_threads);

}  // namespace lucerna::mkmodels
