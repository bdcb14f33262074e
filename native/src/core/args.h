// The daemon command line (PROTOCOL.md section 1):
//   lucerna-<role> <model.gguf> [--stream-fd=N] [--n-ctx=N] [--threads=N]
//                  [--n-gpu-layers=N] [--seed=N]
#pragma once

#include <cstdint>
#include <string>

namespace lucerna {

struct DaemonOptions {
    std::string model_path;
    int stream_fd = -1;        // -1: no stream fd
    int32_t n_ctx = 4096;      // clamped to the model's n_ctx_train after loading
    int32_t n_threads = 0;     // 0: hardware concurrency
    int32_t n_gpu_layers = 999;  // all; negative also means all
    uint32_t seed = 0;         // default seed of sampled generation
};

// Accepts --name=value and --name value. Throws ProtocolError(bad_flag) for an
// unknown flag, a malformed value, a missing or extra model path, or a --stream-fd
// that is not an open descriptor.
DaemonOptions parse_daemon_args(int argc, char ** argv);

}  // namespace lucerna
