#include "mkmodels/candidate_check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/candidate_sampler.h"
#include "engine/token_tree.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama-cpp.h"

namespace lucerna::mkmodels {
namespace {

constexpr int64_t kVocab = 248320;  // the Qwen3.6 vocabulary
constexpr int64_t kRows = 15;       // a 16-token block's proposals

// Row r: normal logits, with r + 1 tokens raised well above the rest (a draft's few
// likely tokens), so the rows run from one clear winner to a flat top.
std::vector<float> seeded_logits() {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
    std::vector<float> out(static_cast<size_t>(kVocab * kRows));
    for (auto & x : out) {
        x = dist(rng);
    }
    for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t i = 0; i <= r; ++i) {
            out[static_cast<size_t>(r * kVocab + token(rng))] = 12.0f - static_cast<float>(i);
        }
    }
    return out;
}

}  // namespace

CandidateCheck check_candidates(int32_t width, int32_t n_threads) {
    ggml_backend_ptr backend(ggml_backend_init_best());
    if (!backend) {
        throw std::runtime_error("cannot start a backend");
    }
    if (ggml_backend_is_cpu(backend.get())) {
        ggml_backend_cpu_set_n_threads(backend.get(), n_threads);
    }
    constexpr size_t kMaxNodes = 1024;
    ggml_init_params params = {ggml_tensor_overhead() * kMaxNodes + ggml_graph_overhead_custom(kMaxNodes, false),
                               nullptr, true};
    ggml_context_ptr ctx(ggml_init(params));
    ggml_tensor * logits = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, kVocab, kRows);
    ggml_cgraph * graph = ggml_new_graph_custom(ctx.get(), kMaxNodes, false);
    llama_sampler_ptr sampler(make_candidate_sampler(width));
    std::vector<llama_sampler_data> rows;
    for (int64_t r = 0; r < kRows; ++r) {
        llama_sampler_data data{ggml_view_1d(ctx.get(), logits, kVocab, static_cast<size_t>(r) * logits->nb[1]),
                                nullptr, nullptr, nullptr};
        sampler->iface->backend_apply(sampler.get(), ctx.get(), graph, &data);
        ggml_build_forward_expand(graph, data.probs);
        ggml_build_forward_expand(graph, data.candidates);
        rows.push_back(data);
    }
    ggml_backend_buffer_ptr buffer(ggml_backend_alloc_ctx_tensors(ctx.get(), backend.get()));
    if (!buffer) {
        throw std::runtime_error("cannot allocate the candidate check's tensors");
    }
    const auto values = seeded_logits();
    ggml_backend_tensor_set(logits, values.data(), 0, ggml_nbytes(logits));
    if (ggml_backend_graph_compute(backend.get(), graph) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("the candidate check's graph failed to compute");
    }

    CandidateCheck check;
    check.backend = ggml_backend_name(backend.get());
    check.rows = static_cast<int32_t>(kRows);
    std::vector<TreeCandidate> want;
    for (int64_t r = 0; r < kRows; ++r) {
        top_candidates(values.data() + r * kVocab, static_cast<int32_t>(kVocab), width, want);
        const llama_sampler_data & data = rows[static_cast<size_t>(r)];
        std::vector<int32_t> ids(static_cast<size_t>(ggml_nelements(data.candidates)));
        std::vector<float> probs(ids.size());
        ggml_backend_tensor_get(data.candidates, ids.data(), 0, ggml_nbytes(data.candidates));
        ggml_backend_tensor_get(data.probs, probs.data(), 0, ggml_nbytes(data.probs));
        std::vector<TreeCandidate> got;
        for (size_t i = 0; i < ids.size(); ++i) {
            got.push_back({ids[i], std::log(probs[i])});
        }
        std::sort(got.begin(), got.end(), ranks_before);
        bool equal = got.size() == want.size();
        for (size_t i = 0; equal && i < got.size(); ++i) {
            equal = got[i].token == want[i].token;
            check.max_logprob_diff =
                std::max(check.max_logprob_diff, std::fabs(static_cast<double>(got[i].logprob - want[i].logprob)));
        }
        check.rows_equal += equal ? 1 : 0;
    }
    return check;
}

}  // namespace lucerna::mkmodels
