// Whether a batched CPU matmul kernel agrees with the engine's one-row path:
// `lucerna-mkmodels --kernel-check TYPE [--threads N]`.
//
// A matmul whose activations have two or more rows takes llamafile's tinyBLAS where the
// weight type has a kernel there (our patch 0105 adds Q4_1); one row takes the type's
// vec_dot. The check multiplies seeded random weights of TYPE by activations of several
// row counts (tile shapes of every size the kernel has) in one batch, and each row again
// on its own, and reports how far the batched rows are from the one-row results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace lucerna::mkmodels {

struct KernelCheck {
    int64_t rows = 0;          // activation rows in the batch
    double max_abs_diff = 0.0; // largest |batched - one row| over the outputs
    double max_abs = 0.0;      // largest |one row| output, the scale of the difference
};

// The quantized engine type named `name` (ggml_type_name: q4_1, q4_K, ...). Throws
// std::runtime_error for a name the engine does not know or a type that is not quantized.
ggml_type quantized_type_named(const std::string & name);

// Weights of `type` (n rows of k values, quantized `weights`) times the `cols` columns of
// `x` (k floats each) on `backend`: in one product, and each column in its own product.
// Both column-major, n values a column. Throws std::runtime_error when the graph fails.
struct MatmulProducts {
    std::vector<float> batched;
    std::vector<float> alone;
};
MatmulProducts batched_and_alone(ggml_backend_t backend, ggml_type type, int64_t k, int64_t n, int64_t cols,
                                 const std::vector<uint8_t> & weights, const std::vector<float> & x);

// n floats from N(0, 1), the same for a seed on every machine.
std::vector<float> seeded_floats(size_t n, uint32_t seed);

// One result per batch size. Throws std::runtime_error for a type name the engine
// does not know or cannot quantize.
std::vector<KernelCheck> check_kernel(const std::string & type_name, int32_t n_threads);

}  // namespace lucerna::mkmodels
