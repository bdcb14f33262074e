// RAII ownership of every engine object the daemons use, and loading a model the way
// every role does. Objects are freed in reverse order of creation by member order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/options.h"
#include "engine/placement.h"
#include "llama-cpp.h"
#include "llama.h"

namespace lucerna {

// llama_backend_init / llama_backend_free for the lifetime of the daemon.
class BackendGuard {
public:
    BackendGuard();
    ~BackendGuard();
    BackendGuard(const BackendGuard &) = delete;
    BackendGuard & operator=(const BackendGuard &) = delete;
};

// An owned llama_batch of fixed capacity (llama_batch_init / llama_batch_free).
class Batch {
public:
    explicit Batch(int32_t capacity);
    ~Batch();
    Batch(const Batch &) = delete;
    Batch & operator=(const Batch &) = delete;

    void clear() { batch_.n_tokens = 0; }
    // A token of sequence `seq` (PROTOCOL.md 9: one per --parallel lane).
    void add(llama_token token, llama_pos pos, bool want_logits, llama_seq_id seq = 0);
    int32_t size() const { return batch_.n_tokens; }
    int32_t capacity() const { return capacity_; }
    const llama_batch & get() const { return batch_; }

private:
    llama_batch batch_;
    int32_t capacity_;
};

struct LoadedModel {
    // Before `model`: the engine keeps pointers into it (devices, tensor overrides)
    // for as long as the model lives, so it must be freed after the model.
    std::unique_ptr<Placement> placement;
    llama_model_ptr model;
    llama_context_ptr context;  // null for roles that only hold weights
    const llama_vocab * vocab = nullptr;
    std::string arch;
    int32_t n_vocab = 0;
    int32_t n_ctx = 0;        // effective: requested, clamped to n_ctx_train
    int32_t n_ctx_train = 0;
    // Cells one sequence may fill: the whole pool (n_ctx, unified), at most n_ctx_train;
    // with --kv-unified=off n_ctx / --parallel (one KV stream per sequence).
    int32_t n_ctx_seq = 0;
    int32_t n_parallel = 1;  // --parallel: sequences 0 .. n_parallel-1
    bool kv_split = false;   // --kv-unified=off: one stream per sequence instead of one pool

    // How an overflow names the limit: "n_ctx=4096", or with several sequences
    // "n_ctx_seq=4096 (the pool)" / "n_ctx_seq=1024 (n_ctx / --parallel, --kv-unified=off)".
    std::string ctx_limit() const {
        if (n_parallel == 1) {
            return "n_ctx=" + std::to_string(n_ctx);
        }
        return "n_ctx_seq=" + std::to_string(n_ctx_seq) +
               (kv_split ? " (n_ctx / --parallel, --kv-unified=off)" : n_ctx_seq < n_ctx ? " (n_ctx_train)" : " (the pool)");
    }
    // Prompt tokens per prefill batch: --chunk, at most the context asked for. Fixed
    // before the engine rounds the context up, so batches never outgrow n_batch.
    int32_t n_chunk = 0;
    // Each decode also takes every logits row's argmax in the graph (engine patch 0104,
    // llama_get_argmax_ith): on for speculative daemons, whose greedy verify reads ids,
    // and wherever the weights run on a GPU (TokenPicker::pick_row).
    bool output_argmax = false;
    std::string backend;      // cpu, cuda, hip: what the loaded weights actually run on
    bool deterministic = false;  // --deterministic: batch-invariant kernels (select_kernels)
    // A verify block decodes without flash attention (VerifyAttention). On the CPU its
    // flash attention takes a batch of fewer than 64 rows one row at a time, each row
    // reading and converting every key again, where the plain path multiplies all rows
    // by the keys at once; a one-token step is faster with it. So: a CPU speculative
    // daemon with --flash-attn=auto, one sequence, not --deterministic (whose verify rows
    // must round as one-token steps do). Measured: git show 7a0c96e:docs/benchmarks.md,
    // "Prompt lookup without flash attention in verify blocks".
    bool verify_without_flash_attn = false;
};

// Turns the context's flash attention on or off for the graphs it builds from now on.
// The engine decides it once, when a context is made, and offers no switch; its graph
// builder reads the flag on every graph it builds, its non-flash path reads a cache laid
// out for flash attention (V not transposed) correctly, and engine patch 0107 keeps it
// from reusing a graph built with the other setting.
void set_flash_attn(llama_context * ctx, bool on);

// A verify decode's attention (LoadedModel::verify_without_flash_attn): off for the
// scope when `active`, on again after.
class VerifyAttention {
public:
    VerifyAttention(llama_context * ctx, bool active) : ctx_(active ? ctx : nullptr) {
        if (ctx_ != nullptr) {
            set_flash_attn(ctx_, false);
        }
    }
    ~VerifyAttention() {
        if (ctx_ != nullptr) {
            set_flash_attn(ctx_, true);
        }
    }
    VerifyAttention(const VerifyAttention &) = delete;
    VerifyAttention & operator=(const VerifyAttention &) = delete;

private:
    llama_context * ctx_;
};

// Empties sequence `seq` of `ctx`. With one sequence (--parallel 1) that is the whole
// memory, cleared as the daemon always did (data zeroed, new cells from index 0); with
// several, only that sequence's cells and recurrent state, so the others keep theirs.
void clear_sequence(llama_context * ctx, llama_seq_id seq);

// The cache type named by --kv-type (f16, f32, bf16, q8_0).
ggml_type kv_cache_type(const std::string & name);

// Loads the GGUF (architecture already checked) and, if `with_context`, creates the
// context (--parallel sequences). Without a context (the ds4 shard) only the vocabulary and
// hyperparameters are read: the shard's device is filled over RPC by its target.
// Throws ProtocolError load_failed / context_failed (and what Placement::plan throws).
LoadedModel load_model(const DaemonOptions & opts, const std::string & arch, bool with_context);

}  // namespace lucerna
