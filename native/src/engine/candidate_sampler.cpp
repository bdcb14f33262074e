#include "engine/candidate_sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "ggml-backend.h"
#include "ggml.h"

namespace lucerna {
namespace {

struct CandidateSampler {
    int32_t width;
};

int32_t width_of(const llama_sampler * sampler) { return static_cast<const CandidateSampler *>(sampler->ctx)->width; }

const char * candidate_name(const llama_sampler * /*sampler*/) { return "lucerna-tree-candidates"; }

// The host form (llama_sampler_apply), for a backend that cannot run the graph: the
// same top `width` with their probabilities under the whole row's softmax.
void candidate_apply(llama_sampler * sampler, llama_token_data_array * cur_p) {
    if (cur_p->size == 0) {
        return;
    }
    float max_logit = cur_p->data[0].logit;
    for (size_t i = 0; i < cur_p->size; ++i) {
        max_logit = std::max(max_logit, cur_p->data[i].logit);
    }
    double sum = 0.0;
    for (size_t i = 0; i < cur_p->size; ++i) {
        sum += std::exp(static_cast<double>(cur_p->data[i].logit - max_logit));
    }
    const size_t keep = std::min(cur_p->size, static_cast<size_t>(std::max(1, width_of(sampler))));
    std::partial_sort(cur_p->data, cur_p->data + keep, cur_p->data + cur_p->size,
                      [](const llama_token_data & a, const llama_token_data & b) {
                          return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
                      });
    for (size_t i = 0; i < keep; ++i) {
        cur_p->data[i].p = static_cast<float>(std::exp(static_cast<double>(cur_p->data[i].logit - max_logit)) / sum);
    }
    cur_p->size = keep;
    cur_p->sorted = true;
}

llama_sampler * candidate_clone(const llama_sampler * sampler) { return make_candidate_sampler(width_of(sampler)); }

void candidate_free(llama_sampler * sampler) { delete static_cast<CandidateSampler *>(sampler->ctx); }

// The graph: top `width` ids of the row, and their logits and probabilities picked from
// the row and from its softmax.
void candidate_backend_apply(llama_sampler * sampler, ggml_context * ctx, ggml_cgraph * /*gf*/,
                             llama_sampler_data * data) {
    ggml_tensor * logits = ggml_reshape_1d(ctx, data->logits, ggml_nelements(data->logits));
    ggml_tensor * top = ggml_top_k(ctx, logits, std::min<int32_t>(width_of(sampler), static_cast<int32_t>(logits->ne[0])));
    ggml_set_name(top, "tree_candidates");
    ggml_tensor * probs = ggml_soft_max(ctx, logits);
    data->probs = ggml_get_rows(ctx, ggml_reshape_2d(ctx, probs, 1, probs->ne[0]), top);
    data->logits = ggml_get_rows(ctx, ggml_reshape_2d(ctx, logits, 1, logits->ne[0]), top);
    data->candidates = data->candidates != nullptr
                           ? ggml_get_rows(ctx, ggml_reshape_2d(ctx, data->candidates, 1, data->candidates->ne[0]), top)
                           : top;
}

// Whether the device runs every op of the graph, probed on a row of 128K logits (as the
// engine probes its own samplers). No device: the CPU backend, which runs them all.
bool candidate_backend_init(llama_sampler * sampler, ggml_backend_buffer_type_t buft, uint32_t /*n_outputs*/) {
    ggml_backend_dev_t device = ggml_backend_buft_get_device(buft);
    if (device == nullptr) {
        return true;
    }
    constexpr size_t kMaxNodes = 64;
    ggml_init_params params{kMaxNodes * ggml_tensor_overhead() + ggml_graph_overhead_custom(kMaxNodes, false), nullptr,
                            /*no_alloc =*/true};
    ggml_context * ctx = ggml_init(params);
    if (ctx == nullptr) {
        return false;
    }
    ggml_cgraph * graph = ggml_new_graph_custom(ctx, kMaxNodes, false);
    llama_sampler_data data{ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 128 * 1024), nullptr, nullptr, nullptr};
    candidate_backend_apply(sampler, ctx, graph, &data);
    ggml_build_forward_expand(graph, data.probs);
    ggml_build_forward_expand(graph, data.logits);
    ggml_build_forward_expand(graph, data.candidates);
    bool supported = true;
    for (int i = 0; i < ggml_graph_n_nodes(graph) && supported; ++i) {
        supported = ggml_backend_dev_supports_op(device, ggml_graph_node(graph, i));
    }
    ggml_free(ctx);
    return supported;
}

llama_sampler_i candidate_interface = {
    /* .name              = */ candidate_name,
    /* .accept            = */ nullptr,
    /* .apply             = */ candidate_apply,
    /* .reset             = */ nullptr,
    /* .clone             = */ candidate_clone,
    /* .free              = */ candidate_free,
    /* .backend_init      = */ candidate_backend_init,
    /* .backend_accept    = */ nullptr,
    /* .backend_apply     = */ candidate_backend_apply,
    /* .backend_set_input = */ nullptr,
    /* .backend_reset     = */ nullptr,
    /* .copy_state        = */ nullptr,
};

}  // namespace

llama_sampler * make_candidate_sampler(int32_t width) {
    return llama_sampler_init(&candidate_interface, new CandidateSampler{std::max(1, width)});
}

llama_sampler * make_candidate_sampler_chain(int32_t width) {
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, make_candidate_sampler(width));
    return chain;
}

bool sampled_candidates(llama_context * ctx, int32_t idx, std::vector<TreeCandidate> & out) {
    const llama_token * ids = llama_get_sampled_candidates_ith(ctx, idx);
    const float * probs = llama_get_sampled_probs_ith(ctx, idx);
    const uint32_t n = llama_get_sampled_candidates_count_ith(ctx, idx);
    if (ids == nullptr || probs == nullptr || n == 0 || llama_get_sampled_probs_count_ith(ctx, idx) != n) {
        return false;
    }
    out.clear();
    for (uint32_t i = 0; i < n; ++i) {
        // A probability that underflowed to 0 is still a candidate, the least likely.
        out.push_back({ids[i], std::log(std::max(probs[i], FLT_MIN))});
    }
    std::sort(out.begin(), out.end(), ranks_before);
    return true;
}

}  // namespace lucerna
