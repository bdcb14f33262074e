#include "mkmodels/draft_check.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "llama-cpp.h"
#include "llama-ext.h"
#include "llama.h"
#include "mkmodels/cpu_engine.h"

namespace lucerna::mkmodels {
namespace {

llama_model_ptr load_cpu(const std::string & path) {
    return llama_model_ptr(llama_model_load_from_file(path.c_str(), cpu_model_params()));
}

}  // namespace

DraftCheck run_draft_block(const std::string & target_path, const std::string & draft_path) {
    DraftCheck check;
    const llama_model_ptr target = load_cpu(target_path);
    const llama_model_ptr draft = load_cpu(draft_path);
    if (!target || !draft) {
        check.note = "could not load the target or the draft";
        return check;
    }
    const llama_context_params cparams = small_context_params();
    const llama_context_ptr ctx_target(llama_init_from_model(target.get(), cparams));
    if (!ctx_target) {
        check.note = "no target context";
        return check;
    }
    {
        // Documented behaviour we rely on: without its target the draft has no context.
        const llama_context_ptr alone(llama_init_from_model(draft.get(), cparams));
        if (alone) {
            check.note = "unexpected: the draft created a context without ctx_other";
            return check;
        }
    }
    const int32_t * layer_ids = llama_model_target_layer_ids(draft.get());
    const uint32_t n_layers = llama_model_target_layer_ids_n(draft.get());
    for (uint32_t k = 0; k < n_layers; ++k) {
        llama_set_embeddings_layer_inp(ctx_target.get(), static_cast<uint32_t>(layer_ids[k]), true);
    }
    llama_context_params dparams = cparams;
    dparams.ctx_other = ctx_target.get();
    const llama_context_ptr ctx_draft(llama_init_from_model(draft.get(), dparams));
    if (!ctx_draft) {
        check.note = "no draft context even with ctx_other set to the target";
        return check;
    }
    llama_set_embeddings_nextn(ctx_draft.get(), true, /*masked =*/true);
    llama_set_causal_attn(ctx_draft.get(), false);

    const llama_vocab * vocab = llama_model_get_vocab(target.get());
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token> prompt = tokenize_test_prompt(vocab);
    const auto n = static_cast<int32_t>(prompt.size());
    if (prompt.empty() || llama_decode(ctx_target.get(), llama_batch_get_one(prompt.data(), n)) != 0) {
        check.note = "target prefill failed";
        return check;
    }
    const llama_token last = argmax(llama_get_logits_ith(ctx_target.get(), -1), n_vocab);

    // Features: for each prompt position, the inputs of the target's extract layers side by side.
    const int64_t n_embd = llama_model_n_embd(target.get());
    const int64_t n_enc = n_embd * n_layers;
    std::vector<float> features(static_cast<size_t>(n * n_enc));
    for (uint32_t k = 0; k < n_layers; ++k) {
        const float * layer = llama_get_embeddings_layer_inp(ctx_target.get(), static_cast<uint32_t>(layer_ids[k]));
        if (layer == nullptr) {
            check.note = "the target did not capture layer " + std::to_string(layer_ids[k]);
            return check;
        }
        for (int32_t i = 0; i < n; ++i) {
            std::memcpy(&features[static_cast<size_t>(i * n_enc + k * n_embd)], layer + i * n_embd,
                        static_cast<size_t>(n_embd) * sizeof(float));
        }
    }
    const llama_batch_ext_ptr batch(llama_batch_ext_init(ctx_draft.get()));
    for (int32_t i = 0; i < n; ++i) {
        const int32_t idx = llama_batch_ext_add_embd(
            batch.get(), 0, {features.data() + static_cast<size_t>(i) * n_enc, 1, static_cast<size_t>(n_enc)});
        const llama_pos pos[4] = {i, i, i, 0};
        llama_batch_ext_set_pos(batch.get(), idx, pos);
    }
    if (llama_process(ctx_draft.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
        check.note = "the draft could not ingest the target features";
        return check;
    }

    char value[32] = {0};
    int32_t block_size = 16;
    if (llama_model_meta_val_str(draft.get(), "dflash.block_size", value, sizeof(value)) >= 0) {
        block_size = std::atoi(value);
    }
    const llama_token mask = llama_vocab_mask(llama_model_get_vocab(draft.get()));
    llama_batch_ext_clear(batch.get());
    for (int32_t i = 0; i < block_size; ++i) {
        const int32_t idx = llama_batch_ext_add_token(batch.get(), 0, i == 0 ? last : mask);
        const llama_pos pos[4] = {n + i, n + i, n + i, 0};
        llama_batch_ext_set_pos(batch.get(), idx, pos);
        llama_batch_ext_set_output_logits(batch.get(), idx, true);
    }
    if (llama_process(ctx_draft.get(), LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) {
        check.note = "the draft block decode failed";
        return check;
    }
    for (int32_t i = 1; i < block_size; ++i) {
        check.drafted.push_back(argmax(llama_get_logits_ith(ctx_draft.get(), i), n_vocab));
    }
    check.ok = true;
    check.note = "draft ran with ctx_other=qwen35 target: no context without it, block of " +
                 std::to_string(block_size) + " denoised";
    return check;
}

}  // namespace lucerna::mkmodels
