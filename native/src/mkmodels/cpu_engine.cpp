#include "mkmodels/cpu_engine.h"

#include <algorithm>
#include <string>

namespace lucerna::mkmodels {
namespace {

bool quiet_progress(float, void *) { return true; }

}  // namespace

llama_model_params cpu_model_params() {
    llama_model_params params = llama_model_default_params();
    params.n_gpu_layers = 0;
    params.progress_callback = quiet_progress;
    return params;
}

llama_context_params small_context_params() {
    llama_context_params params = llama_context_default_params();
    params.n_ctx = 256;
    // A causal context clamps n_batch to n_ctx anyway (every test model is causal when
    // its context is created; the draft switches to non-causal afterwards); saying so
    // here keeps the batch buffers small whatever the engine's default.
    params.n_batch = 256;
    params.n_threads = 2;
    params.n_threads_batch = 2;
    return params;
}

std::vector<llama_token> tokenize_test_prompt(const llama_vocab * vocab) {
    const std::string text = "Hello world, this is Lucerna.";
    std::vector<llama_token> prompt(64);
    const int32_t n = llama_tokenize(vocab, text.c_str(), static_cast<int32_t>(text.size()), prompt.data(),
                                     static_cast<int32_t>(prompt.size()), /*add_special =*/true,
                                     /*parse_special =*/false);
    prompt.resize(static_cast<size_t>(std::max(n, 0)));
    return prompt;
}

llama_token argmax(const float * logits, int32_t n_vocab) {
    return static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits);
}

}  // namespace lucerna::mkmodels
