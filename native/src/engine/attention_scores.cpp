#include "engine/attention_scores.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/engine.h"
#include "engine/log.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "wire/errors.h"
// llama_context itself: the flash-attention switch (set_flash_attn below).
#include "llama-context.h"

namespace lucerna {
namespace {

// The name the engine's graph gives a layer's attention probabilities in its
// non-flash path (llm_graph_context::build_attn_mha: cb(kq, "kq_soft_max", il)).
constexpr char kSoftMaxPrefix[] = "kq_soft_max-";

// Prefill without flash attention forms, per layer, an F32 block of
// ubatch x n_kv x n_head; the ubatch is chosen to keep one block near this size.
constexpr size_t kAttentionBlockBudget = size_t{256} << 20;
constexpr int32_t kMinUbatch = 32;
constexpr int32_t kMaxUbatch = 512;

// Collects the probabilities of the final micro-batch. The engine calls it for every
// graph node (ask=true: "do you want this one?"), then once more with the data of
// each node it said yes to (ask=false), after the backend has synchronised.
class AttentionTap {
public:
    AttentionTap(int32_t n_prompt, std::vector<float> & max_scores) : n_prompt_(n_prompt), scores_(max_scores) {}

    void arm() { armed_ = true; }
    int32_t layers_used() const { return layers_used_; }

    static bool callback(ggml_tensor * t, bool ask, void * user_data) {
        return static_cast<AttentionTap *>(user_data)->on_node(t, ask);
    }

private:
    bool on_node(ggml_tensor * t, bool ask) {
        const bool wanted = armed_ && std::strncmp(t->name, kSoftMaxPrefix, sizeof(kSoftMaxPrefix) - 1) == 0;
        if (ask) {
            return wanted;
        }
        if (wanted) {
            accumulate(t);
        }
        return true;  // false would abort the graph
    }

    // t: [n_kv, n_query, n_head, n_stream] F32, contiguous (the soft_max output).
    void accumulate(const ggml_tensor * t) {
        const int64_t n_kv = t->ne[0];
        const int64_t n_query = t->ne[1];
        const int64_t n_head = t->ne[2] * t->ne[3];
        if (t->type != GGML_TYPE_F32 || n_kv < n_prompt_ || !ggml_is_contiguous(t)) {
            return;  // a windowed layer whose cells no longer line up with positions
        }
        const float * probs = nullptr;
        if (t->buffer != nullptr && ggml_backend_buffer_is_host(t->buffer)) {
            probs = static_cast<const float *>(t->data);
        } else {
            host_copy_.resize(static_cast<size_t>(ggml_nelements(t)));
            ggml_backend_tensor_get(t, host_copy_.data(), 0, ggml_nbytes(t));
            probs = host_copy_.data();
        }
        mean_.resize(static_cast<size_t>(n_prompt_));
        const float inv_query = 1.0f / static_cast<float>(n_query);
        for (int64_t h = 0; h < n_head; ++h) {
            std::fill(mean_.begin(), mean_.end(), 0.0f);
            for (int64_t q = 0; q < n_query; ++q) {
                const float * row = probs + (h * n_query + q) * n_kv;
                for (int64_t j = 0; j < n_prompt_; ++j) {
                    mean_[static_cast<size_t>(j)] += row[j];
                }
            }
            for (int64_t j = 0; j < n_prompt_; ++j) {
                float & best = scores_[static_cast<size_t>(j)];
                best = std::max(best, mean_[static_cast<size_t>(j)] * inv_query);
            }
        }
        ++layers_used_;
    }

    int64_t n_prompt_;
    std::vector<float> & scores_;
    std::vector<float> mean_;
    std::vector<float> host_copy_;
    bool armed_ = false;
    int32_t layers_used_ = 0;
};

// The ubatch of a prefill that forms ubatch x n_kv x n_head probabilities per layer
// (no flash attention): small enough to keep that block near the budget.
int32_t bounded_ubatch(const llama_model * model, uint32_t n_ctx, int32_t n_query) {
    const size_t per_token =
        static_cast<size_t>(n_ctx) * static_cast<size_t>(std::max(1, llama_model_n_head(model))) * sizeof(float);
    int32_t ubatch = kMaxUbatch;
    while (ubatch > kMinUbatch && per_token * static_cast<size_t>(ubatch) > kAttentionBlockBudget) {
        ubatch /= 2;
    }
    return std::max(ubatch, n_query);  // the final micro-batch must hold every query
}

llama_context_ptr scoring_context(llama_model * model, uint32_t n_ctx, int32_t ubatch, llama_flash_attn_type flash_attn,
                                  int32_t n_threads, AttentionTap & tap) {
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n_ctx;
    cparams.n_batch = static_cast<uint32_t>(ubatch);
    cparams.n_ubatch = static_cast<uint32_t>(ubatch);
    cparams.n_seq_max = 1;
    // Only the last position's logits are ever asked for; the engine otherwise reserves
    // ubatch x n_vocab of them (512 MiB for Gemma 3's 262K vocabulary).
    cparams.n_outputs_max = 1;
    cparams.n_threads = n_threads;
    cparams.n_threads_batch = n_threads;
    cparams.no_perf = true;
    cparams.flash_attn_type = flash_attn;
    cparams.swa_full = false;  // windowed layers do not score; keep their caches small
    cparams.cb_eval = AttentionTap::callback;
    cparams.cb_eval_user_data = &tap;
    return llama_context_ptr(llama_init_from_model(model, cparams));
}

// The engine decides flash attention once, when a context is made, and offers no
// switch; its graph builder reads the flag on every graph it builds, and its non-flash
// path reads a cache laid out for flash attention (V not transposed) correctly. So the
// prompt is prefilled with flash attention and only the final micro-batch, the one the
// tap reads, is built without it. (The pinned engine is fixed, so this private field
// cannot move under us; tests/native compress tests check the scores are real.)
void set_flash_attn(llama_context * ctx, bool on) {
    const_cast<llama_cparams &>(ctx->get_cparams()).flash_attn = on;
}

void decode_or_throw(llama_context * ctx, const Batch & batch, const char * what) {
    const int32_t rc = llama_decode(ctx, batch.get());
    if (rc != 0) {
        throw ProtocolError(ErrorCode::kDecodeFailed,
                            std::string("llama_decode failed during ") + what + " (code " + std::to_string(rc) + ")");
    }
}

}  // namespace

AttentionScores score_prompt_attention(llama_model * model, const std::vector<int32_t> & prompt, int32_t lookahead,
                                       int32_t n_threads) {
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    AttentionScores out;
    out.n_query = std::min(lookahead, n_prompt);
    out.per_token.assign(prompt.size(), 0.0f);
    AttentionTap tap(n_prompt, out.per_token);

    const uint32_t n_ctx = (static_cast<uint32_t>(n_prompt) + 255u) / 256u * 256u;
    // Flash attention where the engine can: prefill then costs what a normal prefill
    // costs (at 64K tokens the probabilities-forming prefill took 20 s on an H200).
    int32_t ubatch = std::max(kMaxUbatch, out.n_query);
    llama_context_ptr ctx = scoring_context(model, n_ctx, ubatch, LLAMA_FLASH_ATTN_TYPE_AUTO, n_threads, tap);
    if (ctx && !ctx->get_cparams().flash_attn) {
        ubatch = bounded_ubatch(model, n_ctx, out.n_query);
        ctx.reset();
        ctx = scoring_context(model, n_ctx, ubatch, LLAMA_FLASH_ATTN_TYPE_DISABLED, n_threads, tap);
    }
    out.flash_prefill = ctx && ctx->get_cparams().flash_attn;
    if (!ctx) {
        throw ProtocolError(ErrorCode::kContextFailed, "the engine could not create a scoring context for " +
                                                           std::to_string(n_prompt) + " tokens");
    }

    const int32_t n_prefill = n_prompt - out.n_query;
    Batch batch(ubatch);
    for (int32_t start = 0; start < n_prefill; start += ubatch) {
        batch.clear();
        const int32_t end = std::min(n_prefill, start + ubatch);
        for (int32_t i = start; i < end; ++i) {
            batch.add(prompt[static_cast<size_t>(i)], i, /*want_logits =*/false);
        }
        decode_or_throw(ctx.get(), batch, "compress prefill");
    }
    batch.clear();
    for (int32_t i = n_prefill; i < n_prompt; ++i) {
        batch.add(prompt[static_cast<size_t>(i)], i, /*want_logits =*/i == n_prompt - 1);
    }
    // The final micro-batch has an output and no prefill micro-batch has one, so the
    // engine cannot reuse a flash-attention graph for it.
    set_flash_attn(ctx.get(), false);
    tap.arm();
    decode_or_throw(ctx.get(), batch, "compress scoring");
    out.layers_used = tap.layers_used();
    if (out.layers_used == 0) {
        log_line("compress: no layer attends over all %d prompt tokens; scores are flat", n_prompt);
    }
    return out;
}

}  // namespace lucerna
