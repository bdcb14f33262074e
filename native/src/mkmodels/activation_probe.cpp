#include "mkmodels/activation_probe.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <utility>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama-cpp.h"
#include "mkmodels/cpu_engine.h"

namespace lucerna::mkmodels {
namespace {

// The activations worth watching: the residual stream after each half of a layer, what
// goes into the KV cache, each mixer's and FFN's output, the Gated DeltaNet state it
// carries to the next token, and the logits.
constexpr const char * kWatched[] = {"attn_residual", "l_out",    "Kcur",     "Vcur",         "attn_output",
                                     "linear_attn_out", "ffn_out", "new_state", "result_output"};

struct Probe {
    std::map<std::pair<std::string, int32_t>, size_t> index;
    std::vector<ActivationStat> stats;
    std::vector<float> values;
};

// "l_out-12" -> ("l_out", 12); "result_output" -> ("result_output", -1).
std::pair<std::string, int32_t> split_name(const char * name) {
    const char * dash = std::strrchr(name, '-');
    if (dash != nullptr && dash[1] != '\0') {
        char * end = nullptr;
        const long layer = std::strtol(dash + 1, &end, 10);
        if (*end == '\0') {
            return {std::string(name, dash), static_cast<int32_t>(layer)};
        }
    }
    return {name, -1};
}

bool watched(const std::string & name) {
    for (const char * w : kWatched) {
        if (name == w) {
            return true;
        }
    }
    return false;
}

bool on_eval(ggml_tensor * t, bool ask, void * user_data) {
    auto & probe = *static_cast<Probe *>(user_data);
    const auto key = split_name(t->name);
    const bool wanted = watched(key.first) && (t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16) &&
                        ggml_is_contiguous(t);
    if (ask || !wanted) {
        return ask ? wanted : true;
    }
    const int64_t n = ggml_nelements(t);
    probe.values.resize(static_cast<size_t>(n));
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_get(t, probe.values.data(), 0, ggml_nbytes(t));
    } else {
        std::vector<ggml_fp16_t> half(static_cast<size_t>(n));
        ggml_backend_tensor_get(t, half.data(), 0, ggml_nbytes(t));
        ggml_fp16_to_fp32_row(half.data(), probe.values.data(), n);
    }
    const auto [it, added] = probe.index.emplace(key, probe.stats.size());
    if (added) {
        probe.stats.push_back({key.first, key.second, 0.0, 0, 0});
    }
    ActivationStat & stat = probe.stats[it->second];
    for (const float v : probe.values) {
        if (!std::isfinite(v)) {
            ++stat.nonfinite;
        } else if (std::fabs(v) > stat.max_abs) {
            stat.max_abs = std::fabs(v);
        }
    }
    stat.count += static_cast<uint64_t>(n);
    return true;
}

}  // namespace

std::vector<ActivationStat> probe_activations(const std::string & path, int32_t n_tokens, int32_t n_ubatch,
                                              int32_t n_threads) {
    llama_model_params mparams = cpu_model_params();
    const llama_model_ptr model(llama_model_load_from_file(path.c_str(), mparams));
    if (!model) {
        throw std::runtime_error("cannot load " + path);
    }
    Probe probe;
    llama_context_params cparams = small_context_params();
    cparams.n_ctx = static_cast<uint32_t>(n_tokens + 16);
    cparams.n_batch = static_cast<uint32_t>(n_tokens);
    cparams.n_ubatch = static_cast<uint32_t>(n_ubatch);
    cparams.n_threads = n_threads;
    cparams.n_threads_batch = n_threads;
    cparams.cb_eval = on_eval;
    cparams.cb_eval_user_data = &probe;
    const llama_context_ptr ctx(llama_init_from_model(model.get(), cparams));
    if (!ctx) {
        throw std::runtime_error("cannot create a context for " + path);
    }
    // Token ids spread over the first 150000 ids (inside every Qwen vocabulary's real
    // tokens, whatever padding follows), from a fixed seed.
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model.get()));
    const uint32_t span = static_cast<uint32_t>(std::min(n_vocab, 150000));
    std::vector<llama_token> tokens(static_cast<size_t>(n_tokens));
    uint32_t state = 0x2545f491u;
    for (auto & token : tokens) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        token = static_cast<llama_token>(state % span);
    }
    llama_batch batch = llama_batch_get_one(tokens.data(), n_tokens);
    if (llama_decode(ctx.get(), batch) != 0) {
        throw std::runtime_error("llama_decode failed on " + path);
    }
    llama_synchronize(ctx.get());
    return probe.stats;
}

}  // namespace lucerna::mkmodels
