// Where a target's weights live (PROTOCOL.md section 1: --rpc, --override-tensor,
// --experts-in-host), as llama_model_params the engine understands, and where they
// ended up, for `stats`.
//
// Layers. The devices handed to the engine are the local GPUs followed by the devices
// of the --rpc servers. When there is a local GPU the RPC devices take no layers of
// their own: they hold exactly the tensors --override-tensor sends there (the ds4
// shard holding routed experts). Without a local GPU (a CPU build) the RPC devices
// are the only accelerators, so the offloaded layers (--n-gpu-layers) go to them, as
// with llama.cpp's --rpc; --n-gpu-layers=0 keeps every layer on the CPU and leaves
// the RPC devices only the overridden tensors.
//
// Overrides. --experts-in-host=F names the expert tensors (ffn_*_exps) of the first
// round(F * n) of the model's n MoE layers and keeps them in host (CPU) memory; those
// per-layer patterns are checked before the general --override-tensor patterns, so
// "experts on the shard, but these layers' experts in host" composes. Among
// --override-tensor entries the first match wins, as in the engine.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/options.h"
#include "llama.h"

namespace lucerna {

class Placement {
public:
    // Registers the --rpc servers with the engine (each must accept a connection now),
    // resolves --override-tensor device names and reads the GGUF's MoE layers for
    // --experts-in-host. Throws ProtocolError: rpc_failed for an RPC server that does
    // not answer, bad_flag for a device name no device has.
    static std::unique_ptr<Placement> plan(const PlacementOptions & opts, const std::string & model_path,
                                           int32_t n_gpu_layers);

    // Pinned in memory: the override entries point into patterns_.
    Placement(const Placement &) = delete;
    Placement & operator=(const Placement &) = delete;

    // Points `params` into this object: it must outlive the model loaded with them.
    void apply(llama_model_params & params) const;

    // Human summary for the log: "devices=CUDA0,RPC0 overrides=3"; "" when the
    // engine's defaults apply unchanged.
    std::string describe() const;

private:
    Placement() = default;

    std::vector<ggml_backend_dev_t> devices_;                  // nullptr-terminated; empty: the engine's default
    std::vector<float> tensor_split_;                          // empty: the engine's default split
    std::deque<std::string> patterns_;                         // owns the override patterns (stable c_str())
    std::vector<llama_model_tensor_buft_override> overrides_;  // {nullptr, nullptr}-terminated or empty
};

// Model weights per buffer type after loading ("CPU_Mapped", "RPC0[127.0.0.1:50052]",
// "CUDA0", ...), in bytes, sorted by name; and the same split into host-visible memory
// and device memory. Keys for `stats`: see weight_stats_fields().
struct WeightPlacement {
    std::vector<std::pair<std::string, uint64_t>> by_buffer_type;
    uint64_t host_bytes = 0;
    uint64_t device_bytes = 0;
};

WeightPlacement weight_placement(const llama_context * ctx);

// The `stats` fields: bytes_host, bytes_device and one buft_<name>_bytes per buffer
// type, <name> being the buffer type's name lowercased with every run of other
// characters than [a-z0-9] turned into one '_' (RPC0[127.0.0.1:50052] ->
// buft_rpc0_127_0_0_1_50052_bytes), so keys stay [a-z0-9_]+. None without a
// context (the ds4 shard, whose weights are its clients': see engine/rpc_server.h).
std::vector<std::pair<std::string, uint64_t>> weight_stats_fields(const llama_context * ctx);

// "buft_<name>_bytes" for a buffer type's name, by the rule above (the shard names its
// served device's buffer type this way too, engine/rpc_server.h).
std::string stats_key(const std::string & buft_name);

}  // namespace lucerna
