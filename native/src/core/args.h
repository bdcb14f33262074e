// The daemon command line (PROTOCOL.md section 1):
//   lucerna-<role> <model.gguf> [--stream-fd=N] [--n-ctx=N] [--threads=N]
//                  [--n-gpu-layers=N] [--seed=N]
#pragma once

#include <cstdint>
#include <string>

#include "core/placement_flags.h"

namespace lucerna {

struct DaemonOptions {
    std::string model_path;
    int stream_fd = -1;        // -1: no stream fd
    int32_t n_ctx = 4096;      // clamped to the model's n_ctx_train after loading
    int32_t n_threads = 0;     // 0: hardware concurrency
    int32_t n_gpu_layers = 999;  // all; negative also means all
    uint32_t seed = 0;         // default seed of sampled generation
    // Prefill batch: prefill splits at absolute positions that are multiples of it, so a
    // restore from a chunk-aligned snapshot feeds the engine the batches an
    // uninterrupted run did (PROTOCOL.md 5.5). Also the engine's n_batch and n_ubatch.
    int32_t chunk = 512;
    int32_t n_slots = 64;          // snapshot slots 0 .. n_slots-1
    int64_t max_line = 1 << 20;    // longest command line in bytes (line_too_long beyond)
    PlacementOptions placement;  // --rpc, --override-tensor, --experts-in-host, --rpc-listen
};

// Accepts --name=value and --name value. Throws ProtocolError(bad_flag) for an
// unknown flag, a malformed value, a missing or extra model path, or a --stream-fd
// that is not an open descriptor.
DaemonOptions parse_daemon_args(int argc, char ** argv);

}  // namespace lucerna
