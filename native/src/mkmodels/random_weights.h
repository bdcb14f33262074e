// Deterministic random weights for the test models.
//
// Every tensor gets its own stream, seeded from (generator seed, tensor name), so the
// bytes of a tensor do not depend on the order the engine creates tensors in, and the
// same seed gives the same files on every run and every machine. We implement the
// generator (xoshiro256**) and the normal transform ourselves: std::normal_distribution
// is implementation-defined and would tie the bytes to one standard library.
#pragma once

#include <cstdint>
#include <string>

struct ggml_tensor;

namespace lucerna::mkmodels {

// How a tensor is initialised, chosen from its name and shape.
struct WeightInit {
    float mean = 0.0f;
    float stddev = 0.0f;
};

// Norm weights start near 1, matrices get a fan-in scaled normal (so activations and
// logits keep a unit-ish scale through a few layers and greedy argmax has clear
// winners), small vectors (biases, gates) a small normal, and recurrent decay rates
// (ssm_a) a negative one, as a checkpoint's -exp(A_log) is.
WeightInit weight_init_for(const ggml_tensor & tensor);

// The callback given to llama_model_init_from_user; userdata points to a uint64_t seed.
void fill_tensor(ggml_tensor * tensor, void * userdata);

// FNV-1a, used to derive a tensor's stream from its name.
uint64_t fnv1a64(const std::string & text);

}  // namespace lucerna::mkmodels
