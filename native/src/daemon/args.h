// The daemon command line (PROTOCOL.md section 1):
//   lucerna-<role> <model.gguf> [--stream-fd=N] [--n-ctx=N] [--threads=N]
//                  [--n-gpu-layers=N] [--seed=N] [--draft=<draft.gguf>] ...
#pragma once

#include <cstdint>
#include <string>

#include "daemon/placement_flags.h"
#include "wire/constants.h"

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
    int32_t n_slots = kDefaultSlots;  // snapshot slots 0 .. n_slots-1
    int64_t max_line = 1 << 20;    // longest command line in bytes (line_too_long beyond)
    PlacementOptions placement;  // --rpc, --override-tensor, --experts-in-host, --rpc-listen

    // The engine's attention numerics: --flash-attn=auto|on|off (auto: the engine
    // decides) and --kv-type=f16|f32|bf16|q8_0 for the K and V cache. On CPU a batched
    // decode and a single-token one round differently with flash attention or an F16
    // cache; speculative decoding's exactness tests turn both off (PROTOCOL.md 5.9).
    int32_t flash_attn = -1;  // llama_flash_attn_type: -1 auto, 0 off, 1 on
    std::string kv_type = "f16";

    // Speculative decoding (qwen35 role, PROTOCOL.md 5.9).
    std::string draft_path;        // --draft: DFlash draft GGUF; empty: none
    // --draft-block-size: tokens per verify step (the last committed token plus
    // block - 1 proposals). 0 on the command line means "the draft's dflash.block_size";
    // the daemon resolves it before loading anything (resolve_block_size), so from then
    // on it is the block every speculative step uses.
    int32_t draft_block_size = 0;
    std::string oracle_path;       // --draft-oracle: benchmark-only transcript proposer
    double oracle_accept = 0.0;    // --oracle-accept: mean acceptance length it aims at; 0: block

    bool speculative() const { return !draft_path.empty() || !oracle_path.empty(); }
};

// Accepts --name=value and --name value. Throws ProtocolError(bad_flag) for an
// unknown flag, a malformed value, a missing or extra model path, or a --stream-fd
// that is not an open descriptor.
DaemonOptions parse_daemon_args(int argc, char ** argv);

}  // namespace lucerna
