#include "mkmodels/model_specs.h"

#include <cstdint>
#include <stdexcept>

#include "gguf.h"
#include "llama-arch.h"
#include "llama-hparams.h"
#include "llama-model-saver.h"
#include "mkmodels/vocab_source.h"

namespace lucerna::mkmodels {
namespace {

using u32 = uint32_t;

// Hidden size shared by every test model: it keeps the 152k-row Qwen embedding table
// at ~19 MB in F16, and the DFlash draft must match its target's hidden size anyway.
constexpr u32 kEmbd = 64;
// Dense FFN width and attention head size, also the same in every test model.
constexpr u32 kFeedForward = 128;
constexpr u32 kHeadDim = 64;

// The helpers below write keys in the order the recipes always wrote them: keys the
// engine's saver does not write back are copied from this metadata in order, so the
// order is part of the file's bytes.

// Identity, context, hidden size, norm epsilon and depth: the same keys for every model.
void add_common(llama_model_saver & ms, llm_arch arch, const ModelSpec & spec, u32 n_ctx_train, u32 n_layer) {
    ms.add_kv(LLM_KV_GENERAL_ARCHITECTURE, llm_arch_name(arch));
    ms.add_kv(LLM_KV_GENERAL_NAME, ("lucerna-test-" + spec.name).c_str());
    ms.add_kv(LLM_KV_CONTEXT_LENGTH, n_ctx_train);
    ms.add_kv(LLM_KV_EMBEDDING_LENGTH, kEmbd);
    ms.add_kv(LLM_KV_ATTENTION_LAYERNORM_RMS_EPS, 1e-6f);
    ms.add_kv(LLM_KV_BLOCK_COUNT, n_layer);
}

// Attention heads (query and key/value counts) of kHeadDim each.
void add_attention_heads(llama_model_saver & ms, u32 n_head, u32 n_head_kv) {
    ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT, n_head);
    ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT_KV, n_head_kv);
    ms.add_kv(LLM_KV_ATTENTION_KEY_LENGTH, kHeadDim);
    ms.add_kv(LLM_KV_ATTENTION_VALUE_LENGTH, kHeadDim);
}

// The routed-expert block of the MoE models. Both route 2 of 4 experts plus one
// always-on shared expert (the smallest setup that still exercises routing); they
// differ in the scoring function, the weight scale and whether the shared expert has
// its own width.
struct MoeKvs {
    u32 n_ff_expert;
    u32 n_ff_shared;  // 0: no key, the shared expert is as wide as a routed one
    llama_expert_gating_func_type gating;
    float weights_scale;
};

void add_moe(llama_model_saver & ms, const MoeKvs & moe) {
    ms.add_kv(LLM_KV_EXPERT_FEED_FORWARD_LENGTH, moe.n_ff_expert);
    if (moe.n_ff_shared != 0) {
        ms.add_kv(LLM_KV_EXPERT_SHARED_FEED_FORWARD_LENGTH, moe.n_ff_shared);
    }
    ms.add_kv(LLM_KV_EXPERT_COUNT, u32(4));
    ms.add_kv(LLM_KV_EXPERT_USED_COUNT, u32(2));
    ms.add_kv(LLM_KV_EXPERT_SHARED_COUNT, u32(1));
    ms.add_kv(LLM_KV_EXPERT_GATING_FUNC, u32(moe.gating));
    ms.add_kv(LLM_KV_EXPERT_WEIGHTS_NORM, true);
    ms.add_kv(LLM_KV_EXPERT_WEIGHTS_SCALE, moe.weights_scale);
}

// Qwen3.5's layers: hybrid Gated DeltaNet (linear attention) + gated full attention
// every second layer, M-RoPE sections, partial rotary. Shapes follow the real 0.8B..27B
// layouts scaled down; the DeltaNet head size (32) is one the CUDA kernel instantiates.
void add_qwen35_layers(llama_model_saver & ms) {
    add_attention_heads(ms, 4, 2);
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 10000000.0f);
    ms.add_kv(LLM_KV_ROPE_DIMENSION_COUNT, u32(16));
    ms.add_kv(LLM_KV_ROPE_DIMENSION_SECTIONS, std::vector<u32>{3, 3, 2, 0});
    ms.add_kv(LLM_KV_FULL_ATTENTION_INTERVAL, u32(2));
    ms.add_kv(LLM_KV_SSM_CONV_KERNEL, u32(4));
    ms.add_kv(LLM_KV_SSM_STATE_SIZE, u32(32));
    ms.add_kv(LLM_KV_SSM_TIME_STEP_RANK, u32(4));
    ms.add_kv(LLM_KV_SSM_GROUP_COUNT, u32(2));
    ms.add_kv(LLM_KV_SSM_INNER_SIZE, u32(32 * 4));
}

void qwen35_kvs(llama_model_saver & ms, const ModelSpec & spec) {
    add_common(ms, LLM_ARCH_QWEN35, spec, 8192, 4);
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    add_qwen35_layers(ms);
}

// Qwen3.5 MoE (the 35B-A3B family): qwen35's layers with routed experts (softmax
// scoring) and a gated shared expert in place of the dense FFN.
void qwen35moe_kvs(llama_model_saver & ms, const ModelSpec & spec) {
    add_common(ms, LLM_ARCH_QWEN35MOE, spec, 8192, 4);
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    add_moe(ms, {/*n_ff_expert =*/64, /*n_ff_shared =*/64, LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX,
                 /*weights_scale =*/1.0f});
    add_qwen35_layers(ms);
}

// Qwen3 dense: plain GQA attention with q/k norms, tied embeddings like the small
// Qwen3 checkpoints.
void qwen3_kvs(llama_model_saver & ms, const ModelSpec & spec) {
    add_common(ms, LLM_ARCH_QWEN3, spec, 8192, 2);
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    add_attention_heads(ms, 4, 2);
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 1000000.0f);
}

// Laguna: one leading dense layer, then MoE layers (sigmoid routing with a bias, one
// always-on shared expert), per-head attention output gate, full attention on layer 0
// and sliding-window attention after it (the XS.2 pattern).
void laguna_kvs(llama_model_saver & ms, const ModelSpec & spec) {
    add_common(ms, LLM_ARCH_LAGUNA, spec, 4096, 3);
    ms.add_kv(LLM_KV_LEADING_DENSE_BLOCK_COUNT, u32(1));
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    add_moe(ms, {/*n_ff_expert =*/64, /*n_ff_shared =*/64, LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID,
                 /*weights_scale =*/1.0f});
    add_attention_heads(ms, 4, 2);
    ms.add_kv(LLM_KV_ATTENTION_SLIDING_WINDOW, u32(64));
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 500000.0f);
    ms.add_kv(LLM_KV_ROPE_DIMENSION_COUNT, u32(32));
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE_SWA, 10000.0f);
    ms.add_kv(LLM_KV_ROPE_DIMENSION_COUNT_SWA, u32(64));
}

// DeepSeek-V4: MQA with q LoRA, grouped low-rank output, hyper-connections, MoE with
// sqrt-softplus scoring and a shared expert, compressed attention on later layers.
void deepseek4_kvs(llama_model_saver & ms, const ModelSpec & spec) {
    add_common(ms, LLM_ARCH_DEEPSEEK4, spec, 4096, 3);
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    add_moe(ms, {/*n_ff_expert =*/64, /*n_ff_shared =*/0, LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS,
                 /*weights_scale =*/1.5f});
    ms.add_kv(LLM_KV_SWIGLU_CLAMP_EXP, 10.0f);
    add_attention_heads(ms, 4, 1);
    ms.add_kv(LLM_KV_ATTENTION_Q_LORA_RANK, u32(32));
    ms.add_kv(LLM_KV_ATTENTION_SLIDING_WINDOW, u32(128));
    ms.add_kv(LLM_KV_ATTENTION_OUTPUT_GROUP_COUNT, u32(2));
    ms.add_kv(LLM_KV_ATTENTION_OUTPUT_LORA_RANK, u32(16));
    ms.add_kv(LLM_KV_ATTENTION_COMPRESS_ROPE_FREQ_BASE, 160000.0f);
    // One layer of each kind (three layers above): sliding only (0), CSA with the
    // lightning indexer (4) and HCA (128). The engine needs at least one ratio-4 layer
    // (its indexer cache divides by the indexed head size otherwise) and an indexer key
    // length that is a multiple of 64 (the Hadamard rotation size).
    ms.add_kv(LLM_KV_ATTENTION_COMPRESS_RATIOS, std::vector<u32>{0, 4, 128});
    ms.add_kv(LLM_KV_ATTENTION_INDEXER_HEAD_COUNT, u32(2));
    ms.add_kv(LLM_KV_ATTENTION_INDEXER_KEY_LENGTH, u32(64));
    ms.add_kv(LLM_KV_ATTENTION_INDEXER_TOP_K, u32(16));
    ms.add_kv(LLM_KV_HYPER_CONNECTION_COUNT, u32(4));
    ms.add_kv(LLM_KV_HYPER_CONNECTION_SINKHORN_ITERATIONS, u32(20));
    ms.add_kv(LLM_KV_HYPER_CONNECTION_EPSILON, 1e-6f);
    ms.add_kv(LLM_KV_HASH_LAYER_COUNT, u32(0));
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 10000.0f);
    ms.add_kv(LLM_KV_ROPE_DIMENSION_COUNT, u32(16));
}

// DFlash block-diffusion draft for the qwen35 test model: same hidden size and
// vocabulary, reads the target's hidden states at three of its four layers, and
// shares the target's token embeddings and LM head (they are not in the file).
void dflash_kvs(llama_model_saver & ms, const ModelSpec & spec) {
    add_common(ms, LLM_ARCH_DFLASH, spec, 8192, 1);
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    add_attention_heads(ms, 4, 2);
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 10000000.0f);
    // Drafts for M-RoPE targets carry the degenerate sections [n_rot/2, 0, 0, 0].
    ms.add_kv(LLM_KV_ROPE_DIMENSION_SECTIONS, std::vector<u32>{32, 0, 0, 0});
    ms.add_kv(LLM_KV_TARGET_LAYERS, std::vector<u32>{0, 1, 3});
    ms.add_kv(LLM_KV_DFLASH_BLOCK_SIZE, u32(16));
    // The mask token the drafter fills a block with: an unused Qwen padding id.
    ms.add_kv(LLM_KV_TOKENIZER_MASK_ID, u32(151669));
}

struct Recipe {
    ModelSpec spec;
    llm_arch arch = LLM_ARCH_UNKNOWN;
    void (*add_kvs)(llama_model_saver &, const ModelSpec &) = nullptr;
    const char * tokenizer_pre = nullptr;  // override tokenizer.ggml.pre, or keep the file's
};

Recipe recipe(const char * name, const char * description, const char * vocab_gguf, llm_arch arch,
              void (*add_kvs)(llama_model_saver &, const ModelSpec &)) {
    Recipe r;
    r.spec.name = name;
    r.spec.description = description;
    r.spec.vocab_gguf = vocab_gguf;
    r.arch = arch;
    r.add_kvs = add_kvs;
    return r;
}

const std::vector<Recipe> & recipes() {
    static const std::vector<Recipe> all = [] {
        std::vector<Recipe> out;
        out.push_back(recipe("qwen35", "Qwen3.5 hybrid DeltaNet/attention, real Qwen vocabulary",
                             "ggml-vocab-qwen35.gguf", LLM_ARCH_QWEN35, qwen35_kvs));

        Recipe qwen35_f32 = recipe("qwen35f32", "qwen35 with F32 weights, for exact speculative-decoding tests",
                                   "ggml-vocab-qwen35.gguf", LLM_ARCH_QWEN35, qwen35_kvs);
        qwen35_f32.spec.f32_weights = true;
        qwen35_f32.spec.on_request = true;
        out.push_back(qwen35_f32);

        Recipe qwen35moe = recipe("qwen35moe", "Qwen3.5 MoE hybrid DeltaNet/attention, real Qwen vocabulary",
                                  "ggml-vocab-qwen35.gguf", LLM_ARCH_QWEN35MOE, qwen35moe_kvs);
        qwen35moe.spec.on_request = true;
        out.push_back(qwen35moe);

        Recipe qwen3 = recipe("qwen3", "Qwen3 dense, real Qwen vocabulary, tied embeddings", "ggml-vocab-qwen35.gguf",
                              LLM_ARCH_QWEN3, qwen3_kvs);
        qwen3.spec.omit_tensors = {"output.weight"};
        qwen3.tokenizer_pre = "qwen2";
        out.push_back(qwen3);

        Recipe laguna = recipe("laguna", "Laguna MoE with SWA, GPT-2 vocabulary, tied embeddings",
                               "ggml-vocab-gpt-2.gguf", LLM_ARCH_LAGUNA, laguna_kvs);
        laguna.spec.omit_tensors = {"output.weight"};
        out.push_back(laguna);

        out.push_back(recipe("deepseek4", "DeepSeek-V4 MoE with hyper-connections, DeepSeek-Coder vocabulary",
                             "ggml-vocab-deepseek-coder.gguf", LLM_ARCH_DEEPSEEK4, deepseek4_kvs));

        Recipe dflash = recipe("dflash", "DFlash draft for the qwen35 test model (shares its embeddings and head)",
                               "ggml-vocab-qwen35.gguf", LLM_ARCH_DFLASH, dflash_kvs);
        dflash.spec.omit_tensors = {"token_embd.weight", "output.weight"};
        dflash.spec.generates = false;
        dflash.spec.draft_target = "qwen35";
        out.push_back(dflash);
        return out;
    }();
    return all;
}

const Recipe & recipe_for(const ModelSpec & spec) {
    for (const auto & recipe : recipes()) {
        if (recipe.spec.name == spec.name) {
            return recipe;
        }
    }
    throw std::runtime_error("no recipe for test model " + spec.name);
}

bool contains(const std::string & text, const char * needle) { return text.find(needle) != std::string::npos; }

}  // namespace

const std::vector<ModelSpec> & model_specs() {
    static const std::vector<ModelSpec> specs = [] {
        std::vector<ModelSpec> out;
        for (const auto & recipe : recipes()) {
            out.push_back(recipe.spec);
        }
        return out;
    }();
    return specs;
}

gguf_context_ptr build_metadata(const ModelSpec & spec, const std::string & vocab_dir) {
    const Recipe & recipe = recipe_for(spec);
    gguf_context_ptr meta(gguf_init_empty());
    {
        llama_model_saver ms(recipe.arch, meta.get());
        recipe.add_kvs(ms, spec);
    }
    const gguf_context_ptr vocab = open_gguf_metadata(vocab_dir + "/" + spec.vocab_gguf);
    copy_kvs_with_prefix(meta.get(), vocab.get(), "tokenizer.");
    if (recipe.tokenizer_pre != nullptr) {
        gguf_set_val_str(meta.get(), "tokenizer.ggml.pre", recipe.tokenizer_pre);
    }
    return meta;
}

bool store_as_f16(const std::string & name, int n_dims) {
    if (n_dims < 2) {
        return false;
    }
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || name.compare(dot, std::string::npos, ".weight") != 0) {
        return false;
    }
    // Routers, convolutions, hyper-connection mixers and lookup tables stay F32, as the
    // engine's converters keep them.
    for (const char * keep_f32 : {"conv", "hc_", "gate_inp", "tid2eid", "norm", "sinks"}) {
        if (contains(name, keep_f32)) {
            return false;
        }
    }
    return true;
}

}  // namespace lucerna::mkmodels
