#include "engine/attention_scores.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/engine.h"
#include "engine/log.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "wire/errors.h"
// llama_context itself: whether flash attention is on (get_cparams); llama_model's
// hparams: which layers attend over a sliding window (AttentionTap::counts).
#include "llama-context.h"
#include "llama-model.h"

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
// With flash attention no probabilities block forms, so the prefill takes micro-batches
// as large as a GPU needs to run its matmuls near their rate (a 0.6B drafter at 512
// tokens a micro-batch leaves an H200 mostly idle); on a CPU the size hardly matters.
constexpr int32_t kFlashUbatch = 2048;
// Every segment after the first is prefilled behind the prompt's first tokens: models park attention mass on the opening tokens ("attention
// sinks", StreamingLLM), and a segment without them spreads that mass over whatever
// it starts with, which would score as important.
constexpr int32_t kSinkTokens = 4;

// Collects the probabilities of the final micro-batch. The engine calls it for every
// graph node (ask=true: "do you want this one?"), then once more with the data of
// each node it said yes to (ask=false), after the backend has synchronised.
class AttentionTap {
public:
    AttentionTap(const llama_model * model, std::vector<float> & max_scores) : model_(model), scores_(max_scores) {}

    // cell_token[c]: the prompt index held by KV cell c in this pass (cells fill in order).
    // global_only: count only the layers that attend over the whole context.
    void arm(std::vector<int32_t> cell_token, bool global_only) {
        cell_token_ = std::move(cell_token);
        global_only_ = global_only;
        armed_ = true;
        scored_this_pass_ = 0;
    }
    void disarm() { armed_ = false; }
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
        if (wanted && counts(t)) {
            accumulate(t);
        }
        return true;  // false would abort the graph
    }

    bool counts(const ggml_tensor * t) const {
        if (!global_only_) {
            return true;
        }
        const int il = std::atoi(t->name + sizeof(kSoftMaxPrefix) - 1);
        return il < 0 || !model_->hparams.is_swa(static_cast<uint32_t>(il));
    }

    // t: [n_kv, n_query, n_head, n_stream] F32, contiguous (the soft_max output).
    void accumulate(const ggml_tensor * t) {
        const int64_t n_kv = t->ne[0];
        const int64_t n_query = t->ne[1];
        const int64_t n_head = t->ne[2] * t->ne[3];
        const auto n_cells = static_cast<int64_t>(cell_token_.size());
        if (t->type != GGML_TYPE_F32 || n_kv < n_cells || !ggml_is_contiguous(t)) {
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
        mean_.resize(static_cast<size_t>(n_cells));
        const float inv_query = 1.0f / static_cast<float>(n_query);
        for (int64_t h = 0; h < n_head; ++h) {
            std::fill(mean_.begin(), mean_.end(), 0.0f);
            for (int64_t q = 0; q < n_query; ++q) {
                const float * row = probs + (h * n_query + q) * n_kv;
                for (int64_t c = 0; c < n_cells; ++c) {
                    mean_[static_cast<size_t>(c)] += row[c];
                }
            }
            for (int64_t c = 0; c < n_cells; ++c) {
                float & best = scores_[static_cast<size_t>(cell_token_[static_cast<size_t>(c)])];
                best = std::max(best, mean_[static_cast<size_t>(c)] * inv_query);
            }
        }
        // A layer counts once, however many segments it scored.
        if (++scored_this_pass_ > layers_used_) {
            layers_used_ = scored_this_pass_;
        }
    }

    const llama_model * model_;
    std::vector<float> & scores_;
    std::vector<int32_t> cell_token_;
    bool global_only_ = false;
    std::vector<float> mean_;
    std::vector<float> host_copy_;
    bool armed_ = false;
    int32_t scored_this_pass_ = 0;
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

// The prompt is prefilled with flash attention and only the final micro-batch, the one
// the tap reads, is built without it (set_flash_attn, engine/engine.h). (The pinned
// engine is fixed, so its private flag cannot move under us; tests/native compress
// tests check the scores are real.)
void decode_or_throw(llama_context * ctx, const Batch & batch, const char * what) {
    const int32_t rc = llama_decode(ctx, batch.get());
    if (rc != 0) {
        throw ProtocolError(ErrorCode::kDecodeFailed,
                            std::string("llama_decode failed during ") + what + " (code " + std::to_string(rc) + ")");
    }
}

}  // namespace

AttentionScores score_prompt_attention(llama_model * model, const std::vector<int32_t> & prompt, int32_t lookahead,
                                       int32_t segment, int32_t n_threads) {
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    AttentionScores out;
    out.n_query = std::min(lookahead, n_prompt);
    out.per_token.assign(prompt.size(), 0.0f);
    AttentionTap tap(model, out.per_token);

    const int32_t n_body = n_prompt - out.n_query;  // the tokens the queries score
    const bool segmented = segment > 0 && n_body > segment;
    const int32_t step = segmented ? segment : std::max(n_body, 1);
    const int32_t n_sink = segmented ? std::min(kSinkTokens, n_body) : 0;
    out.n_segments = segmented ? (n_body + segment - 1) / segment : 1;
    const int32_t n_cells = segmented ? n_sink + segment + out.n_query : n_prompt;

    const uint32_t n_ctx = (static_cast<uint32_t>(n_cells) + 255u) / 256u * 256u;
    // Flash attention where the engine can: prefill then costs what a normal prefill
    // costs (at 64K tokens the probabilities-forming prefill took 20 s on an H200).
    int32_t ubatch = std::max(kFlashUbatch, out.n_query);
    llama_context_ptr ctx = scoring_context(model, n_ctx, ubatch, LLAMA_FLASH_ATTN_TYPE_AUTO, n_threads, tap);
    if (ctx && !ctx->get_cparams().flash_attn) {
        ubatch = bounded_ubatch(model, n_ctx, out.n_query);
        ctx.reset();
        ctx = scoring_context(model, n_ctx, ubatch, LLAMA_FLASH_ATTN_TYPE_DISABLED, n_threads, tap);
    }
    if (!ctx) {
        throw ProtocolError(ErrorCode::kContextFailed, "the engine could not create a scoring context for " +
                                                           std::to_string(n_cells) + " tokens");
    }
    out.flash_prefill = ctx->get_cparams().flash_attn;

    Batch batch(ubatch);
    for (int32_t begin = 0; begin == 0 || begin < n_body; begin += step) {
        // This pass's cells, in the order they fill: the sink, the segment, the queries.
        std::vector<int32_t> cell_token;
        for (int32_t i = 0; begin > 0 && i < n_sink; ++i) {
            cell_token.push_back(i);
        }
        for (int32_t i = begin; i < std::min(n_body, begin + step); ++i) {
            cell_token.push_back(i);
        }
        if (begin > 0) {
            llama_memory_clear(llama_get_memory(ctx.get()), /*data =*/true);
        }
        set_flash_attn(ctx.get(), out.flash_prefill);
        for (size_t start = 0; start < cell_token.size(); start += static_cast<size_t>(ubatch)) {
            batch.clear();
            const size_t stop = std::min(cell_token.size(), start + static_cast<size_t>(ubatch));
            for (size_t c = start; c < stop; ++c) {
                const int32_t i = cell_token[c];
                batch.add(prompt[static_cast<size_t>(i)], static_cast<llama_pos>(c), /*want_logits =*/false);
            }
            decode_or_throw(ctx.get(), batch, "compress prefill");
        }
        batch.clear();
        for (int32_t i = n_body; i < n_prompt; ++i) {
            batch.add(prompt[static_cast<size_t>(i)], static_cast<llama_pos>(cell_token.size()),
                      /*want_logits =*/i == n_prompt - 1);
            cell_token.push_back(i);
        }
        // The final micro-batch has an output and no prefill micro-batch has one, so the
        // engine cannot reuse a flash-attention graph for it.
        set_flash_attn(ctx.get(), false);
        // A windowed layer sees a whole segment but never the whole prompt: in one pass it
        // does not score (its cells are recycled), so it does not in segments either.
        tap.arm(std::move(cell_token), /*global_only =*/segmented);
        decode_or_throw(ctx.get(), batch, "compress scoring");
        tap.disarm();
    }
    out.layers_used = tap.layers_used();
    if (out.layers_used == 0) {
        log_line("compress: no layer attends over all %d scored cells; scores are flat", n_cells);
    }
    return out;
}

}  // namespace lucerna
