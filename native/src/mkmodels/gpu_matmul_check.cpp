#include "mkmodels/gpu_matmul_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "mkmodels/kernel_check.h"

namespace lucerna::mkmodels {
namespace {

// Columns: every width the small-batch kernels serve, and 16 (MMQ's side).
constexpr int64_t kColumns[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
// Accuracy: 1000 rows (62 tiles of 16 and 8 rows over), at both of the 27B's row lengths.
constexpr int64_t kAccuracyRows = 1000;
constexpr int64_t kAccuracyK[] = {5120, 17408};

// The 27B target's products (K x N): ffn_up/gate, ffn_down, the Gated DeltaNet input
// projection, its output projection; and the LM head, which is Q6_K in Q4_K_M.
struct Shape {
    int64_t k;
    int64_t n;
};
constexpr Shape kShapes[] = {{5120, 17408}, {17408, 5120}, {5120, 10240}, {6144, 5120}};
constexpr Shape kHead = {5120, 248320};
// Distinct weight copies per timed chain: at least this many bytes in all, so the chain
// does not fit the L2 cache (50 MB on the H100/H200) and every product reads memory.
constexpr size_t kChainBytes = size_t(1) << 30;
constexpr int kTimedRuns = 5;
// Quantized rows: a pool of random rows, repeated down the matrix (quantizing a 1 GB LM
// head on the CPU would take minutes and measures nothing more).
constexpr int64_t kPoolRows = 64;

std::vector<uint8_t> quantized_rows(ggml_type type, int64_t k, int64_t n, uint32_t seed) {
    const auto values = seeded_floats(static_cast<size_t>(kPoolRows * k), seed);
    const size_t row_bytes = ggml_row_size(type, k);
    std::vector<uint8_t> pool(row_bytes * kPoolRows);
    ggml_quantize_chunk(type, values.data(), pool.data(), 0, kPoolRows, k, nullptr);
    std::vector<uint8_t> out(row_bytes * static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
        std::memcpy(out.data() + row_bytes * static_cast<size_t>(r),
                    pool.data() + row_bytes * static_cast<size_t>(r % kPoolRows), row_bytes);
    }
    return out;
}

ggml_context_ptr graph_context(size_t n_tensors) {
    ggml_init_params params = {ggml_tensor_overhead() * n_tensors + ggml_graph_overhead(), nullptr, true};
    return ggml_context_ptr(ggml_init(params));
}

void compute(ggml_backend_t backend, ggml_cgraph * graph) {
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error(std::string("a matmul graph failed on ") + ggml_backend_name(backend));
    }
}

GpuMatmulAccuracy accuracy(ggml_backend_t gpu, ggml_backend_t cpu, ggml_type type, int64_t k, int64_t cols) {
    const auto w = quantized_rows(type, k, kAccuracyRows, 11);
    const auto x = seeded_floats(static_cast<size_t>(k * cols), 12);
    const MatmulProducts on_gpu = batched_and_alone(gpu, type, k, kAccuracyRows, cols, w, x);
    const std::vector<float> & got = on_gpu.batched;
    const std::vector<float> want = batched_and_alone(cpu, type, k, kAccuracyRows, cols, w, x).batched;
    double err = 0.0;
    double norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
        norm += static_cast<double>(want[i]) * want[i];
    }
    GpuMatmulAccuracy out{ggml_type_name(type), k, kAccuracyRows, cols};
    out.nmse = norm > 0.0 ? err / norm : err;
    out.invariant = std::memcmp(got.data(), on_gpu.alone.data(), got.size() * sizeof(float)) == 0;
    return out;
}

// Times `type` at `shape` for every width of kColumns: the weights are uploaded once.
std::vector<GpuMatmulTiming> timings(ggml_backend_t gpu, ggml_type type, Shape shape) {
    const size_t weight_bytes = ggml_row_size(type, shape.k) * static_cast<size_t>(shape.n);
    const int chain = static_cast<int>(std::max<size_t>(2, std::min<size_t>(16, kChainBytes / weight_bytes + 1)));
    ggml_context_ptr weight_ctx = graph_context(static_cast<size_t>(chain));
    std::vector<ggml_tensor *> weights;
    for (int i = 0; i < chain; ++i) {
        weights.push_back(ggml_new_tensor_2d(weight_ctx.get(), type, shape.k, shape.n));
    }
    ggml_backend_buffer_ptr weight_buffer(ggml_backend_alloc_ctx_tensors(weight_ctx.get(), gpu));
    if (!weight_buffer) {
        throw std::runtime_error("cannot allocate the matmul timing's weights");
    }
    const auto w = quantized_rows(type, shape.k, shape.n, 21);
    for (ggml_tensor * weight : weights) {
        ggml_backend_tensor_set(weight, w.data(), 0, w.size());
    }
    std::vector<GpuMatmulTiming> out;
    for (const int64_t cols : kColumns) {
        ggml_context_ptr ctx = graph_context(static_cast<size_t>(chain + 2));
        ggml_tensor * acts = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, shape.k, cols);
        ggml_cgraph * graph = ggml_new_graph(ctx.get());
        for (ggml_tensor * weight : weights) {
            ggml_build_forward_expand(graph, ggml_mul_mat(ctx.get(), weight, acts));
        }
        ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors(ctx.get(), gpu));
        if (!buffer) {
            throw std::runtime_error("cannot allocate the matmul timing's activations");
        }
        const auto x = seeded_floats(static_cast<size_t>(shape.k * cols), 22);
        ggml_backend_tensor_set(acts, x.data(), 0, ggml_nbytes(acts));
        compute(gpu, graph);  // warm-up: kernels loaded, the backend's graph captured
        ggml_backend_synchronize(gpu);
        double best = 1e30;
        for (int run = 0; run < kTimedRuns; ++run) {
            const auto start = std::chrono::steady_clock::now();
            compute(gpu, graph);
            ggml_backend_synchronize(gpu);
            const double us =
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
            best = std::min(best, us / chain);
        }
        out.push_back({ggml_type_name(type), shape.k, shape.n, cols, best, static_cast<double>(weight_bytes) / best / 1e3});
    }
    return out;
}

}  // namespace

GpuMatmulCheck check_gpu_matmul(const std::vector<std::string> & type_names, int32_t n_threads) {
    ggml_backend_ptr gpu(ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_GPU, nullptr));
    if (!gpu) {
        throw std::runtime_error("no GPU backend: the engine was built without one, or no device is visible");
    }
    ggml_backend_ptr cpu(ggml_backend_cpu_init());
    if (!cpu) {
        throw std::runtime_error("cannot start the CPU backend");
    }
    ggml_backend_cpu_set_n_threads(cpu.get(), n_threads);
    GpuMatmulCheck check;
    check.backend = ggml_backend_name(gpu.get());
    for (const auto & name : type_names) {
        const ggml_type type = quantized_type_named(name);
        for (const int64_t k : kAccuracyK) {
            for (const int64_t cols : kColumns) {
                check.accuracy.push_back(accuracy(gpu.get(), cpu.get(), type, k, cols));
            }
        }
        std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
        if (type == GGML_TYPE_Q6_K) {
            shapes.push_back(kHead);
        }
        for (const Shape shape : shapes) {
            const auto timed = timings(gpu.get(), type, shape);
            check.timing.insert(check.timing.end(), timed.begin(), timed.end());
        }
    }
    return check;
}

}  // namespace lucerna::mkmodels
