// What a daemon was started with (PROTOCOL.md section 1), as the engine uses it: the
// model, the context and batch sizes, the numerics, the speculative decoding files and
// where the weights go. daemon/args.cpp and daemon/placement_flags.cpp parse the
// command line into these; they live here, below daemon/, because engine/ loads with
// them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/lookup.h"
#include "wire/constants.h"

namespace lucerna {

// One --override-tensor entry: tensors whose name matches `pattern` (std::regex,
// searched anywhere in the name, as the engine does) go to the device `device`.
struct TensorOverride {
    std::string pattern;
    std::string device;
};

struct PlacementOptions {
    std::vector<std::string> rpc_servers;   // --rpc, each "HOST:PORT", in order: RPC0, RPC1, ...
    std::vector<TensorOverride> overrides;  // --override-tensor, first match wins
    std::optional<double> experts_in_host;  // --experts-in-host (laguna), in [0, 1]
    std::optional<std::string> rpc_listen;  // --rpc-listen (ds4_shard), "HOST:PORT"
    // --rpc-timeout-ms: an RPC peer silent this long is dead (engine/dead_peer.h).
    int32_t rpc_timeout_ms = kDefaultRpcTimeoutMs;

    // The shard's endpoint when --rpc-listen is left out.
    static constexpr const char * kDefaultRpcListen = "127.0.0.1:50052";
};

struct DaemonOptions {
    std::string model_path;
    int stream_fd = -1;        // -1: no stream fd
    // --channel=stdout: stream bytes share stdout with the replies, framed (PROTOCOL.md
    // 10), for a launcher that carries only stdin and stdout (ssh). false: --stream-fd.
    bool one_channel = false;
    // --keepalive-ms: on one channel, an `@alive` line this often (0: none), so that the
    // client tells a daemon busy on a long prefill from a link that is gone.
    int32_t keepalive_ms = kDefaultKeepaliveMs;
    int32_t n_ctx = 4096;      // clamped to the model's n_ctx_train after loading
    int32_t n_threads = 0;     // 0: hardware concurrency
    int32_t n_gpu_layers = 999;  // all; negative also means all
    uint32_t seed = 0;         // default seed of sampled generation
    // Prefill batch: prefill splits at absolute positions that are multiples of it, so a
    // restore from a chunk-aligned snapshot feeds the engine the batches an
    // uninterrupted run did (PROTOCOL.md 5.5). Also the engine's n_batch and n_ubatch.
    int32_t chunk = 512;
    int32_t n_slots = kDefaultSlots;  // snapshot slots 0 .. n_slots-1
    // --parallel: sequences that decode together in one engine context (PROTOCOL.md 9),
    // numbered 0 .. parallel-1. They share one KV pool of n_ctx cells; each has its own
    // recurrent state.
    int32_t parallel = 1;
    // --checkpoint-mib: the most host memory the sequences' checkpoints (PROTOCOL.md 5.10)
    // hold together, in bytes; past it the least recently used sequences' oldest ones go
    // first (bound_checkpoints, engine/prefix_reuse.h). 0: no bound beyond 16 a sequence.
    uint64_t checkpoint_bytes = 0;
    // --kv-unified=off: one KV stream of n_ctx / parallel cells per sequence instead of
    // the pool, so a sequence alone computes bit for bit what a --parallel 1 run does.
    bool kv_split = false;
    int64_t max_line = 1 << 20;    // longest command line in bytes (line_too_long beyond)
    PlacementOptions placement;  // --rpc, --override-tensor, --experts-in-host, --rpc-listen

    // The engine's attention numerics: --flash-attn=auto|on|off (auto: the engine
    // decides) and --kv-type=f16|f32|bf16|q8_0 for the K and V cache. On CPU a batched
    // decode and a single-token one round differently with flash attention or an F16
    // cache; speculative decoding's exactness tests turn both off (PROTOCOL.md 5.9).
    int32_t flash_attn = -1;  // llama_flash_attn_type: -1 auto, 0 off, 1 on
    std::string kv_type = "f16";
    // --deterministic=on|off: batch-invariant kernels. Every kernel then computes a token's
    // row the same way whatever else is in its batch (our engine patch 0201 switches the
    // CPU backend to its reference paths), so greedy tokens do not depend on the prefill
    // chunk, a verify block, other sequences or a restore (PROTOCOL.md section 1).
    bool deterministic = false;
    // --parked=on|off: start with the target parked (PROTOCOL.md 5.6): a vocabulary-only
    // load and no context, as after `park target`. A tokenizer daemon starts so instead of
    // loading the weights only to release them again.
    bool parked = false;

    // Speculative decoding (qwen35 role, PROTOCOL.md 5.9).
    std::string draft_path;        // --draft: DFlash draft GGUF; empty: none
    // --draft-block-size: tokens per verify step (the last committed token plus
    // block - 1 proposals). 0 on the command line means "the draft's dflash.block_size";
    // the daemon resolves it before loading anything (resolve_block_size), so from then
    // on it is the block every speculative step uses.
    int32_t draft_block_size = 0;
    std::string oracle_path;       // --draft-oracle: benchmark-only transcript proposer
    double oracle_accept = 0.0;    // --oracle-accept: mean acceptance length it aims at; 0: block
    // --oracle-rank: where the oracle ranks the transcript's token at the position its
    // schedule gets wrong, among the candidates a tree verify step asks for (0: not
    // among them, as in a chain step).
    int32_t oracle_rank = 0;
    // --draft-tree: tree verify (DDTree, engine/token_tree.h) with at most this many
    // proposals a step, on at most --draft-tree-branches branches; 0: chain verify.
    int32_t draft_tree = 0;
    int32_t draft_tree_branches = kDefaultTreeBranches;
    static constexpr int32_t kDefaultTreeBranches = 8;
    // --lookup=off|opt-in|on: prompt lookup (engine/lookup.h), any target role. opt-in
    // and on ready the context for verify steps (as a draft does); on also makes
    // lookup=1 the default of `generate` and `restore`.
    enum class Lookup { kOff, kOptIn, kOn };
    Lookup lookup = Lookup::kOff;
    int32_t lookup_min = kDefaultLookupMin;  // --lookup-min: shortest match that proposes

    // Whether the daemon may decode speculatively, so its context is sized for a verify
    // block (and a hybrid target keeps the recurrent copies a rollback needs).
    bool speculative() const { return !draft_path.empty() || !oracle_path.empty() || lookup != Lookup::kOff; }
    // Rows of the largest verify step: one block, or with --draft-tree a block per branch.
    int32_t verify_rows() const { return draft_block_size * (draft_tree > 0 ? draft_tree_branches : 1); }
};

// Splits "HOST:PORT" (port 1..65535, host non-empty). Returns false if malformed.
bool split_endpoint(const std::string & endpoint, std::string & host, int & port);

}  // namespace lucerna
