#include "engine/sampling.h"

#include <algorithm>
#include <cmath>

#include "engine/grammar.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

// The engine reads LLAMA_DEFAULT_SEED (0xFFFFFFFF) as "seed from the clock"; every seed
// we are given must be deterministic, so that one value is replaced by its neighbour.
uint32_t deterministic_seed(uint32_t seed) { return seed == LLAMA_DEFAULT_SEED ? LLAMA_DEFAULT_SEED - 1 : seed; }

// penalties -> top_k -> top_p -> min_p -> temperature -> draw(seed); each stage only
// when it does something, so the chain is the same as the protocol's.
llama_sampler_ptr make_chain(const SamplingParams & sp, int32_t n_vocab) {
    llama_sampler_ptr chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
    if (sp.rep_pen != 1.0f || sp.freq_pen != 0.0f || sp.pres_pen != 0.0f) {
        llama_sampler_chain_add(
            chain.get(), llama_sampler_init_penalties(n_vocab, sp.rep_window, sp.rep_pen, sp.freq_pen, sp.pres_pen));
    }
    if (sp.top_k > 0) {
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(sp.top_k));
    }
    if (sp.top_p < 1.0f) {  // top_p=0 keeps the single most likely token
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(sp.top_p, 1));
    }
    if (sp.min_p > 0.0f) {
        llama_sampler_chain_add(chain.get(), llama_sampler_init_min_p(sp.min_p, 1));
    }
    llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(sp.temp));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_dist(deterministic_seed(sp.seed)));
    return chain;
}

// A row holding a NaN has no largest logit: the forward pass overflowed, and whichever id
// came out would be noise presented as text, so it is an error instead.
[[noreturn]] void throw_nan_logits() {
    throw ProtocolError(ErrorCode::kDecodeFailed,
                        "the model's logits hold NaN (its forward pass overflowed); there is no greedy pick");
}

// Greedy's pick: the first index of the largest logit, the rule the engine's argmax
// follows on CPU and CUDA alike (native/engine-patches/0103).
llama_token first_argmax(const float * logits, int32_t n_vocab) {
    llama_token best = 0;
    float max = -INFINITY;
    bool nan = false;
    for (llama_token id = 0; id < n_vocab; ++id) {
        const float logit = logits[id];
        nan = nan || std::isnan(logit);
        if (logit > max) {
            max = logit;
            best = id;
        }
    }
    if (nan) {
        throw_nan_logits();
    }
    return best;
}

}  // namespace

TokenPicker::TokenPicker(const SamplingParams & params, const llama_vocab * vocab, llama_sampler * grammar)
    : params_(params), vocab_(vocab), n_vocab_(llama_vocab_n_tokens(vocab)), grammar_(grammar) {
    if (params.temp > 0.0f) {
        chain_ = make_chain(params, n_vocab_);
    }
}

llama_token TokenPicker::pick_device_argmax(llama_context * ctx, int32_t row) {
    const int32_t id = llama_get_argmax_ith(ctx, row);
    if (id < 0) {
        throw_nan_logits();
    }
    return id;
}

std::optional<llama_token> TokenPicker::pick_row(llama_context * ctx, int32_t row, const float * logits,
                                                 bool context_argmax) {
    if (!reads_logits(row, context_argmax)) {
        return pick_device_argmax(ctx, row);
    }
    return pick(logits);
}

void TokenPicker::accept_prompt(const std::vector<int32_t> & prompt) {
    if (!chain_) {
        return;
    }
    const auto n = static_cast<int32_t>(prompt.size());
    for (int32_t i = std::max(0, n - params_.rep_window); i < n; ++i) {
        llama_sampler_accept(chain_.get(), prompt[static_cast<size_t>(i)]);
    }
}

llama_token_data_array TokenPicker::fill_candidates(const float * logits) {
    candidates_.resize(static_cast<size_t>(n_vocab_));
    for (llama_token id = 0; id < n_vocab_; ++id) {
        candidates_[static_cast<size_t>(id)] = llama_token_data{id, logits[id], 0.0f};
    }
    return {candidates_.data(), candidates_.size(), /*selected =*/-1, /*sorted =*/false};
}

llama_token TokenPicker::choose(llama_token_data_array & cur) {
    if (chain_) {
        llama_sampler_apply(chain_.get(), &cur);
        return cur.data[cur.selected].id;
    }
    // Greedy: the first index of the largest logit, so ties resolve the same everywhere.
    // A grammar only masks (it keeps id order), so under one this is the same rule over
    // the tokens it allows.
    const auto best = std::max_element(cur.data, cur.data + cur.size,
                                       [](const llama_token_data & a, const llama_token_data & b) {
                                           return a.logit < b.logit;
                                       });
    return best->id;
}

bool TokenPicker::grammar_allows(llama_token token, float logit) const {
    llama_token_data single = {token, logit, 0.0f};
    llama_token_data_array one = {&single, 1, /*selected =*/-1, /*sorted =*/false};
    llama_sampler_apply(grammar_, &one);
    return single.logit != -INFINITY;
}

std::optional<llama_token> TokenPicker::pick(const float * logits) {
    if (!chain_ && !grammar_) {
        return first_argmax(logits, n_vocab_);
    }
    llama_token_data_array cur = fill_candidates(logits);
    llama_token token = choose(cur);
    // Checking a grammar against the whole vocabulary costs a parse per token (262k of
    // them for gemma3) every step. Like llama.cpp's common sampler, first check only the
    // unconstrained choice; mask the vocabulary only when the grammar rejects it. Greedy
    // picks the same token either way: the overall argmax, if allowed, is the allowed
    // argmax. The mask also tells when the grammar is complete, which an allowed
    // end-of-generation pick may mean too (PROTOCOL.md: that is finish=stop, not eog), so
    // that pick is checked against the mask as well, and kept unless the grammar is done.
    if (grammar_) {
        const bool allowed = grammar_allows(token, logits[token]);
        if (!allowed || llama_vocab_is_eog(vocab_, token)) {
            cur = fill_candidates(logits);
            llama_sampler_apply(grammar_, &cur);
            if (grammar_is_complete(vocab_, cur)) {
                return std::nullopt;
            }
            if (!allowed) {
                token = choose(cur);
            }
        }
    }
    if (chain_) {
        llama_sampler_accept(chain_.get(), token);
    }
    if (grammar_) {
        llama_sampler_accept(grammar_, token);
    }
    return token;
}

}  // namespace lucerna
