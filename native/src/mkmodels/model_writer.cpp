#include "mkmodels/model_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "gguf.h"
#include "llama-cpp.h"
#include "llama-model-saver.h"
#include "llama-model.h"
#include "mkmodels/cpu_engine.h"
#include "mkmodels/draft_check.h"
#include "mkmodels/random_weights.h"
#include "mkmodels/vocab_source.h"

namespace lucerna::mkmodels {
namespace {

llama_model_ptr init_model(gguf_context * meta, uint64_t seed, bool no_alloc) {
    llama_model_params params = cpu_model_params();
    params.no_alloc = no_alloc;
    uint64_t seed_copy = seed;
    llama_model_ptr model(llama_model_init_from_user(meta, fill_tensor, &seed_copy, params));
    if (!model) {
        throw std::runtime_error("the engine refused the generated metadata (see the log above)");
    }
    return model;
}

// The names and ranks of every tensor the engine creates for this metadata, in a
// canonical (sorted) order so that the file layout never depends on buffer types.
std::vector<std::pair<std::string, const ggml_tensor *>> model_tensors(const llama_model & model) {
    std::vector<std::pair<std::string, const ggml_tensor *>> out;
    for (const auto & [name, tensor] : model.tensors_by_name) {
        out.emplace_back(name, tensor);
    }
    std::sort(out.begin(), out.end(), [](const auto & a, const auto & b) { return a.first < b.first; });
    out.erase(std::unique(out.begin(), out.end(), [](const auto & a, const auto & b) { return a.first == b.first; }),
              out.end());
    return out;
}

// Declares F16 storage for the matmul weights: llama_model_init_from_user creates a
// tensor with the type of a same-named tensor in the metadata, F32 otherwise.
void declare_f16_tensors(gguf_context * meta, const llama_model & probe) {
    for (const auto & [name, tensor] : model_tensors(probe)) {
        if (!store_as_f16(name, ggml_n_dims(tensor))) {
            continue;
        }
        ggml_tensor decl;
        std::memset(&decl, 0, sizeof(decl));
        decl.type = GGML_TYPE_F16;
        ggml_set_name(&decl, name.c_str());
        gguf_add_tensor(meta, &decl);
    }
}

bool omitted(const ModelSpec & spec, const std::string & name) {
    if (std::find(spec.omit_tensors.begin(), spec.omit_tensors.end(), name) != spec.omit_tensors.end()) {
        return true;
    }
    // Per-tensor quantisation scales the engine adds to every matmul weight when it
    // builds a model without a file: they are identity here and absent in real F16 GGUFs.
    const std::string suffix = ".scale";
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

WriteResult write_model(const ModelSpec & spec, const std::string & vocab_dir, const std::string & out_dir,
                        uint64_t seed) {
    gguf_context_ptr meta = build_metadata(spec, vocab_dir);
    {
        // First pass without weights: learn which tensors the engine creates.
        const llama_model_ptr probe = init_model(meta.get(), seed, /*no_alloc =*/true);
        if (!spec.f32_weights) {
            declare_f16_tensors(meta.get(), *probe);
        }
    }
    const llama_model_ptr model = init_model(meta.get(), seed, /*no_alloc =*/false);

    // The engine's saver writes the hyperparameters and vocabulary as it understood
    // them; we add the metadata keys it does not write back (chat template, DFlash's
    // target layers and block size) and every tensor the model holds, in sorted order.
    llama_model_saver saver(model.get());
    saver.add_kv_from_model();
    copy_missing_kvs(saver.gguf_ctx, meta.get());
    WriteResult result;
    for (const auto & [name, tensor] : model_tensors(*model)) {
        if (!omitted(spec, name)) {
            saver.add_tensor(tensor);
            ++result.n_tensors;
        }
    }

    std::filesystem::create_directories(out_dir);
    result.path = out_dir + "/" + spec.name + ".gguf";
    const std::string tmp = result.path + ".partial";
    if (!gguf_write_to_file(saver.gguf_ctx, tmp.c_str(), /*only_meta =*/false)) {
        throw std::runtime_error("could not write " + tmp);
    }
    std::filesystem::rename(tmp, result.path);
    result.bytes = std::filesystem::file_size(result.path);
    return result;
}

VerifyResult verify_model(const ModelSpec & spec, const std::string & path, int n_gen) {
    VerifyResult result;
    const llama_model_ptr model(llama_model_load_from_file(path.c_str(), cpu_model_params()));
    if (!model) {
        result.note = "llama_model_load_from_file failed";
        return result;
    }
    result.loaded = true;
    char arch[64] = {0};
    llama_model_meta_val_str(model.get(), "general.architecture", arch, sizeof(arch));
    result.arch = arch;
    const llama_vocab * vocab = llama_model_get_vocab(model.get());
    result.n_vocab = llama_vocab_n_tokens(vocab);

    if (!spec.generates) {
        const std::string target =
            std::filesystem::path(path).parent_path().string() + "/" + spec.draft_target + ".gguf";
        if (spec.draft_target.empty() || !std::filesystem::exists(target)) {
            result.note = "loads as a model; it needs its target's context (ctx_other) for embeddings, "
                          "LM head and hidden states, and " + target + " is not there";
            return result;
        }
        const DraftCheck check = run_draft_block(target, path);
        result.generated = check.ok;
        result.tokens.assign(check.drafted.begin(), check.drafted.end());
        result.note = check.note;
        return result;
    }

    const llama_context_ptr ctx(llama_init_from_model(model.get(), small_context_params()));
    if (!ctx) {
        result.note = "llama_init_from_model failed";
        return result;
    }

    const std::vector<llama_token> prompt = tokenize_test_prompt(vocab);
    if (prompt.empty()) {
        result.note = "tokenize failed";
        return result;
    }
    result.prompt.assign(prompt.begin(), prompt.end());

    std::vector<llama_token> pending = prompt;
    for (int step = 0; step < n_gen; ++step) {
        llama_batch batch = llama_batch_get_one(pending.data(), static_cast<int32_t>(pending.size()));
        if (llama_decode(ctx.get(), batch) != 0) {
            result.note = "llama_decode failed at step " + std::to_string(step);
            return result;
        }
        const llama_token next = argmax(llama_get_logits_ith(ctx.get(), -1), result.n_vocab);
        result.tokens.push_back(next);
        pending.assign(1, next);
    }
    result.generated = true;
    return result;
}

}  // namespace lucerna::mkmodels
