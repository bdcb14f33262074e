// Choosing each generated token (PROTOCOL.md 5.1): greedy argmax or the sampler chain,
// both optionally constrained by a grammar.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "llama-cpp.h"
#include "llama.h"

namespace lucerna {

struct SamplingParams {
    float temp = 0.0f;  // 0: greedy argmax, every other knob unused
    int32_t top_k = 0;  // 0: off
    float top_p = 1.0f;
    float min_p = 0.0f;
    float rep_pen = 1.0f;
    float freq_pen = 0.0f;
    float pres_pen = 0.0f;
    int32_t rep_window = 64;
    uint32_t seed = 0;
};

class TokenPicker {
public:
    // `grammar` (the engine's grammar sampler, see engine/grammar.h) is borrowed and may
    // be null; it keeps its own parse state, so one picker serves one generation.
    TokenPicker(const SamplingParams & params, const llama_vocab * vocab, llama_sampler * grammar);

    // Penalties look back over the prompt too, as they would over earlier turns.
    void accept_prompt(const std::vector<int32_t> & prompt);

    // The next token from the logits of the last position, already accepted by the
    // chain and the grammar. nullopt when the grammar is complete: it admits no token
    // but end-of-generation ones.
    std::optional<llama_token> pick(const float * logits);

    // Greedy with no grammar: a pick is the argmax of the row alone, which the engine can
    // take on the device (pick_row), and there is no state to advance.
    bool argmax_only() const { return !chain_ && grammar_ == nullptr; }

    // Whether pick_row reads the row's logits: not where it takes the graph's argmax.
    bool reads_logits(int32_t row, bool context_argmax) const {
        return !(context_argmax && row >= 0 && argmax_only());
    }

    // The pick for output row `row` of the context's last decode, whose logits are
    // `logits`: the graph's argmax of the row where the context takes it
    // (`context_argmax`, llama_set_output_argmax), the row is the context's (`row` >= 0)
    // and argmax_only() holds; pick() otherwise. Same token either way.
    std::optional<llama_token> pick_row(llama_context * ctx, int32_t row, const float * logits,
                                        bool context_argmax);

private:
    // argmax_only's pick of output row `row` of the last decode of a context that takes
    // the argmax in its graph (llama_set_output_argmax): the same rule as pick(), the
    // first largest logit, and the same error for a row holding a NaN (-1 from the engine).
    static llama_token pick_device_argmax(llama_context * ctx, int32_t row);
    // Every token's logit, in id order, as the candidate array the samplers work on.
    llama_token_data_array fill_candidates(const float * logits);
    // The unconstrained choice: argmax when greedy, else a draw through the chain.
    llama_token choose(llama_token_data_array & cur);
    // Whether the grammar, in its current state, accepts `token` next.
    bool grammar_allows(llama_token token, float logit) const;

    SamplingParams params_;
    const llama_vocab * vocab_;
    int32_t n_vocab_;
    llama_sampler * grammar_;
    llama_sampler_ptr chain_;  // null when greedy
    std::vector<llama_token_data> candidates_;
};

}  // namespace lucerna
