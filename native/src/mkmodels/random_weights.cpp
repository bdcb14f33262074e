#include "mkmodels/random_weights.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace lucerna::mkmodels {
namespace {

uint64_t splitmix64(uint64_t & state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

class Xoshiro256 {
public:
    explicit Xoshiro256(uint64_t seed) {
        for (auto & word : s_) {
            word = splitmix64(seed);
        }
    }

    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in (0, 1]: never 0, so log() below is finite.
    double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * (1.0 / 9007199254740992.0); }

    // Box-Muller, both outputs used.
    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double radius = std::sqrt(-2.0 * std::log(uniform()));
        const double angle = 6.283185307179586 * uniform();
        spare_ = radius * std::sin(angle);
        has_spare_ = true;
        return radius * std::cos(angle);
    }

private:
    uint64_t s_[4] = {};
    double spare_ = 0.0;
    bool has_spare_ = false;
};

bool contains(const char * haystack, const char * needle) { return std::strstr(haystack, needle) != nullptr; }

bool ends_with(const char * text, const char * suffix) {
    const size_t n = std::strlen(text);
    const size_t m = std::strlen(suffix);
    return n >= m && std::strcmp(text + n - m, suffix) == 0;
}

}  // namespace

uint64_t fnv1a64(const std::string & text) {
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (const unsigned char c : text) {
        hash ^= c;
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

WeightInit weight_init_for(const ggml_tensor & tensor) {
    const char * name = tensor.name;
    const int n_dims = ggml_n_dims(&tensor);
    if (ends_with(name, ".scale")) {
        return {1.0f, 0.0f};  // per-tensor quantisation scales: identity
    }
    if (ends_with(name, ".ssm_a")) {
        // A recurrent layer's decay rate, -exp(A_log) in a checkpoint: always negative, so
        // the state shrinks between tokens. A zero-mean draw makes half the heads grow by
        // exp(|a| * softplus(...)) a token instead: the Gated DeltaNet state of the qwen35
        // shapes then passed 1e9 after 256 tokens and overflowed F32 (NaN logits) near
        // 1000, on CPU and CUDA alike (issue 14 item 4; `lucerna-mkmodels --probe`).
        return {-1.0f, 0.05f};
    }
    if (n_dims == 1 && contains(name, "norm")) {
        return {1.0f, 0.05f};
    }
    if (n_dims >= 2 && !contains(name, "conv") && !contains(name, "hc_")) {
        // ggml's ne[0] is the input dimension of a matmul weight (and n_embd for the
        // token embedding table), so this is the usual 1/sqrt(fan_in).
        return {0.0f, static_cast<float>(1.0 / std::sqrt(static_cast<double>(tensor.ne[0])))};
    }
    return {0.0f, 0.05f};
}

void fill_tensor(ggml_tensor * tensor, void * userdata) {
    const uint64_t seed = *static_cast<const uint64_t *>(userdata);
    Xoshiro256 rng(seed ^ fnv1a64(tensor->name));
    const WeightInit init = weight_init_for(*tensor);
    const int64_t n = ggml_nelements(tensor);

    auto sample = [&]() {
        return static_cast<float>(init.mean + init.stddev * rng.normal());
    };
    if (tensor->type == GGML_TYPE_F32) {
        std::vector<float> values(static_cast<size_t>(n));
        for (auto & v : values) {
            v = sample();
        }
        ggml_backend_tensor_set(tensor, values.data(), 0, ggml_nbytes(tensor));
    } else if (tensor->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> values(static_cast<size_t>(n));
        for (auto & v : values) {
            v = ggml_fp32_to_fp16(sample());
        }
        ggml_backend_tensor_set(tensor, values.data(), 0, ggml_nbytes(tensor));
    } else {
        throw std::runtime_error(std::string("cannot initialise tensor ") + tensor->name + " of type " +
                                 ggml_type_name(tensor->type));
    }
}

}  // namespace lucerna::mkmodels
