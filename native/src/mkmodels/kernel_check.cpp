#include "mkmodels/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>

#include "ggml-backend.h"
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

struct GgmlContextFree {
    void operator()(ggml_context * ctx) const { ggml_free(ctx); }
};
struct BackendFree {
    void operator()(ggml_backend_t backend) const { ggml_backend_free(backend); }
};
struct BufferFree {
    void operator()(ggml_backend_buffer_t buffer) const { ggml_backend_buffer_free(buffer); }
};

KernelCheck check_batch(ggml_type type, int64_t rows, ggml_backend_t backend) {
    const size_t n_tensors = static_cast<size_t>(2 * rows + 4);
    ggml_init_params params = {ggml_tensor_overhead() * n_tensors + ggml_graph_overhead(), nullptr, true};
    std::unique_ptr<ggml_context, GgmlContextFree> ctx(ggml_init(params));
    ggml_tensor * weights = ggml_new_tensor_2d(ctx.get(), type, kWeightCols, kWeightRows);
    ggml_tensor * acts = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, kWeightCols, rows);
    ggml_cgraph * graph = ggml_new_graph(ctx.get());
    ggml_tensor * batched = ggml_mul_mat(ctx.get(), weights, acts);
    ggml_build_forward_expand(graph, batched);
    std::vector<ggml_tensor *> single;
    for (int64_t r = 0; r < rows; ++r) {
        ggml_tensor * row = ggml_view_2d(ctx.get(), acts, kWeightCols, 1, acts->nb[1], r * acts->nb[1]);
        single.push_back(ggml_mul_mat(ctx.get(), weights, row));
        ggml_build_forward_expand(graph, single.back());
    }
    std::unique_ptr<ggml_backend_buffer, BufferFree> buffer(ggml_backend_alloc_ctx_tensors(ctx.get(), backend));
    if (!buffer) {
        throw std::runtime_error("cannot allocate the kernel check's tensors");
    }

    const auto weight_values = seeded_floats(static_cast<size_t>(kWeightRows * kWeightCols), 1);
    std::vector<uint8_t> quantized(ggml_nbytes(weights));
    ggml_quantize_chunk(type, weight_values.data(), quantized.data(), 0, kWeightRows, kWeightCols, nullptr);
    ggml_backend_tensor_set(weights, quantized.data(), 0, quantized.size());
    const auto act_values = seeded_floats(static_cast<size_t>(rows * kWeightCols), 2 + static_cast<uint32_t>(rows));
    ggml_backend_tensor_set(acts, act_values.data(), 0, ggml_nbytes(acts));
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("the kernel check's graph failed to compute");
    }

    std::vector<float> got(static_cast<size_t>(kWeightRows * rows));
    ggml_backend_tensor_get(batched, got.data(), 0, ggml_nbytes(batched));
    KernelCheck check;
    check.rows = rows;
    std::vector<float> want(static_cast<size_t>(kWeightRows));
    for (int64_t r = 0; r < rows; ++r) {
        ggml_backend_tensor_get(single[static_cast<size_t>(r)], want.data(), 0, want.size() * sizeof(float));
        for (int64_t i = 0; i < kWeightRows; ++i) {
            const double value = got[static_cast<size_t>(r * kWeightRows + i)];
            check.max_abs_diff = std::max(check.max_abs_diff, std::fabs(value - want[static_cast<size_t>(i)]));
            check.max_abs = std::max(check.max_abs, std::fabs(static_cast<double>(want[static_cast<size_t>(i)])));
        }
    }
    return check;
}

}  // namespace

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
    std::unique_ptr<ggml_backend, BackendFree> backend(ggml_backend_cpu_init());
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
