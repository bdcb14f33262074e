#include "mkmodels/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace lucerna::mkmodels {
namespace {

// 67 weight rows: not a multiple of 4, so the kernel's 4-row tiles and its 3-, 2- and
// 1-row remainders all run. 576 columns: 18 blocks of 32 (SmolLM2's hidden size).
constexpr int64_t kWeightRows = 67;
constexpr int64_t kWeightCols = 576;
// Batch sizes covering tile widths 1 to 4 and their remainders.
constexpr int64_t kBatchRows[] = {2, 3, 4, 5, 7, 8, 13, 16};

KernelCheck check_batch(ggml_type type, int64_t rows, ggml_backend_t backend) {
    const auto weight_values = seeded_floats(static_cast<size_t>(kWeightRows * kWeightCols), 1);
    std::vector<uint8_t> quantized(ggml_row_size(type, kWeightCols) * kWeightRows);
    ggml_quantize_chunk(type, weight_values.data(), quantized.data(), 0, kWeightRows, kWeightCols, nullptr);
    const auto act_values = seeded_floats(static_cast<size_t>(rows * kWeightCols), 2 + static_cast<uint32_t>(rows));
    const MatmulProducts products =
        batched_and_alone(backend, type, kWeightCols, kWeightRows, rows, quantized, act_values);
    KernelCheck check;
    check.rows = rows;
    for (size_t i = 0; i < products.batched.size(); ++i) {
        const double want = products.alone[i];
        check.max_abs_diff = std::max(check.max_abs_diff, std::fabs(products.batched[i] - want));
        check.max_abs = std::max(check.max_abs, std::fabs(want));
    }
    return check;
}

}  // namespace

MatmulProducts batched_and_alone(ggml_backend_t backend, ggml_type type, int64_t k, int64_t n, int64_t cols,
                                 const std::vector<uint8_t> & weights, const std::vector<float> & x) {
    ggml_init_params params = {ggml_tensor_overhead() * static_cast<size_t>(2 * cols + 4) + ggml_graph_overhead(),
                               nullptr, true};
    ggml_context_ptr ctx(ggml_init(params));
    ggml_tensor * w = ggml_new_tensor_2d(ctx.get(), type, k, n);
    ggml_tensor * acts = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, k, cols);
    ggml_cgraph * graph = ggml_new_graph(ctx.get());
    ggml_tensor * batched = ggml_mul_mat(ctx.get(), w, acts);
    ggml_build_forward_expand(graph, batched);
    std::vector<ggml_tensor *> alone;
    for (int64_t c = 0; c < cols; ++c) {
        ggml_tensor * column = ggml_view_2d(ctx.get(), acts, k, 1, acts->nb[1], static_cast<size_t>(c) * acts->nb[1]);
        alone.push_back(ggml_mul_mat(ctx.get(), w, column));
        ggml_build_forward_expand(graph, alone.back());
    }
    ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors(ctx.get(), backend));
    if (!buffer) {
        throw std::runtime_error("cannot allocate a matmul check's tensors");
    }
    ggml_backend_tensor_set(w, weights.data(), 0, ggml_nbytes(w));
    ggml_backend_tensor_set(acts, x.data(), 0, ggml_nbytes(acts));
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error(std::string("a matmul check's graph failed on ") + ggml_backend_name(backend));
    }
    MatmulProducts out;
    out.batched.resize(static_cast<size_t>(n * cols));
    out.alone.resize(out.batched.size());
    ggml_backend_tensor_get(batched, out.batched.data(), 0, ggml_nbytes(batched));
    for (int64_t c = 0; c < cols; ++c) {
        ggml_backend_tensor_get(alone[static_cast<size_t>(c)], out.alone.data() + c * n, 0,
                                static_cast<size_t>(n) * sizeof(float));
    }
    return out;
}

ggml_type quantized_type_named(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const auto type = static_cast<ggml_type>(t);
        const char * type_name = ggml_type_name(type);
        if (type_name != nullptr && name == type_name && ggml_blck_size(type) > 1) {
            return type;
        }
    }
    throw std::runtime_error("no quantized engine type is named '" + name + "' (e.g. q4_1, q4_0, q8_0)");
}

std::vector<float> seeded_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> out(n);
    for (auto & x : out) {
        x = dist(rng);
    }
    return out;
}

std::vector<KernelCheck> check_kernel(const std::string & type_name, int32_t n_threads) {
    const ggml_type type = quantized_type_named(type_name);
    ggml_backend_ptr backend(ggml_backend_cpu_init());
    if (!backend) {
        throw std::runtime_error("cannot start the CPU backend");
    }
    ggml_backend_cpu_set_n_threads(backend.get(), n_threads);
    std::vector<KernelCheck> out;
    for (const int64_t rows : kBatchRows) {
        out.push_back(check_batch(type, rows, backend.get()));
    }
    return out;
}

}  // namespace lucerna::mkmodels
