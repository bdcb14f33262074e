#include "engine/engine.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include "engine/dead_peer.h"
#include "engine/gguf_probe.h"
#include "engine/log.h"
#include "engine/prefix_reuse.h"
#include "engine/state_memory.h"
#include "ggml-backend.h"
#include "wire/errors.h"
// llama-ext.h (the engine's staging API) is the only way to ask which devices a loaded
// model uses; besides this translation unit only engine/placement.cpp includes it.
#include "llama-ext.h"
// llama_context itself: the flash-attention switch (set_flash_attn).
#include "llama-context.h"

namespace lucerna {
namespace {

bool quiet_progress(float /*progress*/, void * /*user_data*/) { return true; }

// The engine's batch-invariance switch (native/engine-patches/0201-*, 0202-*): each backend
// reads it when it is created, i.e. with every llama_context (ours, the draft's, the
// scorer's). Set or cleared from the flag alone, so an inherited environment cannot
// turn the mode on behind the ready line's back.
constexpr const char * kBatchInvariantEnv = "GGML_BATCH_INVARIANT";

void select_kernels(bool deterministic) {
    if (deterministic) {
        ::setenv(kBatchInvariantEnv, "1", 1);
    } else {
        ::unsetenv(kBatchInvariantEnv);
    }
}

}  // namespace

void set_flash_attn(llama_context * ctx, bool on) { const_cast<llama_cparams &>(ctx->get_cparams()).flash_attn = on; }

namespace {

std::string backend_of_device(ggml_backend_dev_t dev) {
    std::string name = ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name == "rocm") {
        return "hip";  // ggml's HIP build registers itself as ROCm
    }
    return name;
}

// The first of the model's devices that is a GPU on this host (RPC devices are remote),
// or null: the model runs on the CPU.
ggml_backend_dev_t local_gpu_device(const llama_model * model, int32_t n_gpu_layers) {
    if (n_gpu_layers == 0) {
        return nullptr;
    }
    const int32_t n_devices = llama_model_n_devices(model);
    for (int32_t i = 0; i < n_devices; ++i) {
        ggml_backend_dev_t dev = llama_model_get_device(model, i);
        // RPC devices (--rpc) are remote; the ready line names this host's backend, and
        // `stats` shows what lives where (engine/placement.h).
        if (dev == nullptr || backend_of_device(dev) == "rpc") {
            continue;
        }
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            return dev;
        }
    }
    return nullptr;
}

// The ready line's backend: the first GPU-class device holding part of the model, or
// cpu when no layers are offloaded (or the build has no GPU backend).
std::string detect_backend(const llama_model * model, int32_t n_gpu_layers) {
    ggml_backend_dev_t gpu = local_gpu_device(model, n_gpu_layers);
    return gpu != nullptr ? backend_of_device(gpu) : "cpu";
}

// Backends whose kernels the engine patches make batch-invariant under
// kBatchInvariantEnv: 0201 (CPU) and 0202 (CUDA). The ready line must not claim the mode
// on any other (HIP, Metal, Vulkan...): their kernels still change with the batch.
void refuse_variant_kernels(const std::string & backend) {
    if (backend != "cpu" && backend != "cuda") {
        throw ProtocolError(ErrorCode::kBadFlag, "--deterministic=on has batch-invariant kernels on the CPU and CUDA "
                                                 "backends only, and this model runs on " +
                                                     backend + "; use --n-gpu-layers=0 or leave it off");
    }
}

}  // namespace

ggml_type kv_cache_type(const std::string & name) {
    if (name == "f32") return GGML_TYPE_F32;
    if (name == "bf16") return GGML_TYPE_BF16;
    if (name == "q8_0") return GGML_TYPE_Q8_0;
    return GGML_TYPE_F16;
}

void clear_sequence(llama_context * ctx, llama_seq_id seq) {
    llama_memory_t mem = llama_get_memory(ctx);
    if (llama_n_seq_max(ctx) == 1) {
        llama_memory_clear(mem, /*data =*/true);
    } else {
        llama_memory_seq_rm(mem, seq, -1, -1);
    }
}

BackendGuard::BackendGuard() { llama_backend_init(); }

BackendGuard::~BackendGuard() { llama_backend_free(); }

Batch::Batch(int32_t capacity)
    : batch_(llama_batch_init(capacity, /*embd =*/0, /*n_seq_max =*/1)), capacity_(capacity) {
    batch_.n_tokens = 0;
}

Batch::~Batch() { llama_batch_free(batch_); }

void Batch::add(llama_token token, llama_pos pos, bool want_logits, llama_seq_id seq) {
    if (batch_.n_tokens >= capacity_) {
        throw std::logic_error("batch overflow");
    }
    const int32_t i = batch_.n_tokens++;
    batch_.token[i] = token;
    batch_.pos[i] = pos;
    batch_.n_seq_id[i] = 1;
    batch_.seq_id[i][0] = seq;
    batch_.logits[i] = want_logits ? 1 : 0;
}

LoadedModel load_model(const DaemonOptions & opts, const std::string & arch, bool with_context) {
    LoadedModel loaded;
    loaded.arch = arch;
    select_kernels(opts.deterministic);
    loaded.deterministic = opts.deterministic;

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = opts.n_gpu_layers;
    mparams.progress_callback = quiet_progress;
    mparams.vocab_only = !with_context;
    if (with_context) {
        loaded.placement = Placement::plan(opts.placement, opts.model_path, opts.n_gpu_layers);
        loaded.placement->apply(mparams);
        const std::string placed = loaded.placement->describe();
        if (!placed.empty()) {
            log_line("placement: %s", placed.c_str());
        }
    }
    loaded.model.reset(llama_model_load_from_file(opts.model_path.c_str(), mparams));
    if (!loaded.model) {
        throw ProtocolError(ErrorCode::kLoadFailed,
                            "the engine could not load " + opts.model_path + " (set LUCERNA_LOG=info for its log)");
    }
    loaded.vocab = llama_model_get_vocab(loaded.model.get());
    loaded.n_vocab = llama_vocab_n_tokens(loaded.vocab);
    loaded.n_ctx_train = with_context ? llama_model_n_ctx_train(loaded.model.get())
                                      : read_gguf_context_length(opts.model_path, arch);
    loaded.n_ctx = opts.n_ctx;
    // The pool holds every sequence's tokens; one sequence's positions stop at n_ctx_train.
    const int64_t pool_cap = static_cast<int64_t>(loaded.n_ctx_train) * std::max(1, opts.parallel);
    if (loaded.n_ctx_train > 0 && loaded.n_ctx > pool_cap) {
        log_line("--n-ctx=%d is beyond the model's n_ctx_train=%d x --parallel=%d; using %lld", opts.n_ctx,
                 loaded.n_ctx_train, opts.parallel, static_cast<long long>(pool_cap));
        loaded.n_ctx = static_cast<int32_t>(pool_cap);
    }
    loaded.n_ctx_seq = loaded.n_ctx;
    loaded.backend = detect_backend(loaded.model.get(), opts.n_gpu_layers);
    if (with_context) {
        // Checkpoints and snapshots copy states out of the context's devices: page-locked
        // host memory where that is a GPU (engine/state_memory.h).
        use_state_memory_of(local_gpu_device(loaded.model.get(), opts.n_gpu_layers));
    }
    if (opts.deterministic && with_context) {
        refuse_variant_kernels(loaded.backend);
    }

    if (with_context) {
        llama_context_params cparams = llama_context_default_params();
        cparams.n_ctx = static_cast<uint32_t>(loaded.n_ctx);
        // One prefill chunk is one engine batch and one micro-batch: the engine must not
        // re-split our chunks, or a restored run would no longer see the batches an
        // uninterrupted run saw (PROTOCOL.md 5.5, measured: logits depend on the split).
        loaded.n_chunk = std::min(loaded.n_ctx, opts.chunk);
        cparams.n_batch = static_cast<uint32_t>(loaded.n_chunk);
        if (opts.speculative()) {
            // A verify step decodes one block (the last token plus block - 1 proposals)
            // and may have to roll all but its first token back. The recurrent state
            // (Gated DeltaNet, conv) keeps one copy per position of the block for that
            // (n_rs_seq), and the engine only keeps those copies when the block is one
            // micro-batch with room to spare (llama_batch_allocr::split_equal asserts
            // n_ubatch > n_rs_seq + 1). Prefill still splits at --chunk itself
            // (generate.cpp), so a bigger engine batch changes no prefill batch.
            cparams.n_rs_seq = static_cast<uint32_t>(opts.draft_block_size - 1);
            cparams.n_batch = std::max(cparams.n_batch, static_cast<uint32_t>(opts.verify_rows() + 1));
        }
        if (opts.parallel > 1) {
            // A batched step carries one decode token per running sequence (a verify
            // block of a speculative one) beside a whole prefill chunk
            // (daemon/batch_scheduler.h), in one micro-batch.
            cparams.n_batch = static_cast<uint32_t>(loaded.n_chunk) +
                              static_cast<uint32_t>(opts.parallel) *
                                  static_cast<uint32_t>(opts.speculative() ? opts.draft_block_size : 1);
        }
        cparams.n_ubatch = cparams.n_batch;
        // A tree verify step decodes each branch as a sequence of its own after the live
        // one (commands/tree_verify.h).
        cparams.n_seq_max = static_cast<uint32_t>(opts.parallel + (opts.draft_tree > 0 ? opts.draft_tree_branches : 0));
        // One KV pool of n_ctx cells that every sequence draws from (PROTOCOL.md 9), so a
        // long sequence can use the cells the others leave free; when the pool runs
        // short the batch scheduler preempts (daemon/batch_scheduler.h). The recurrent
        // state stays one copy per sequence (n_seq_max). The price, measured: a sequence's
        // cells sit wherever the pool has room, so attention sums them in another order
        // than a solo run would and a sequence alone is no longer bit-identical to a
        // --parallel 1 run (9.4). --kv-unified=off keeps one stream of n_ctx / N cells each.
        // With one sequence the two are the same.
        cparams.kv_unified = !opts.kv_split;
        cparams.flash_attn_type = static_cast<llama_flash_attn_type>(opts.flash_attn);
        cparams.type_k = kv_cache_type(opts.kv_type);
        cparams.type_v = cparams.type_k;
        cparams.n_threads = opts.n_threads;
        cparams.n_threads_batch = opts.n_threads;
        cparams.no_perf = true;
        loaded.context.reset(llama_init_from_model(loaded.model.get(), cparams));
        if (!loaded.context) {
            throw ProtocolError(ErrorCode::kContextFailed, "the engine could not create a context with n_ctx=" +
                                                               std::to_string(loaded.n_ctx));
        }
        // Logits rows stay on the device until a pick or a record reads one (engine patch
        // 0212, commands/emit.h pick_and_emit): greedy steps on a GPU copy none. On the CPU
        // a row's copy is a memcpy either way; it is on there too, so that every test
        // drives the path the GPU takes.
        llama_set_output_logits_on_demand(loaded.context.get(), true);
        if (opts.speculative() || loaded.backend != "cpu") {
            // Greedy picks read each row's argmax as an id computed beside the logits, one
            // kernel over all rows, instead of scanning vocabulary-wide rows on the host:
            // up to a block of them in a verify (commands/decode_speculative.cpp), one per
            // sequence in a step of several (daemon/batch_scheduler.cpp). On the CPU the
            // kernel would take the engine's own threads for the same scan, so a plain
            // CPU daemon scans on the host.
            llama_set_output_argmax(loaded.context.get(), true);
            loaded.output_argmax = true;
        }
        if (opts.speculative()) {
            loaded.verify_without_flash_attn = loaded.backend == "cpu" && opts.flash_attn == -1 &&
                                               opts.parallel == 1 && !opts.deterministic &&
                                               loaded.context->get_cparams().flash_attn;
        }
        if (!opts.placement.rpc_servers.empty()) {
            // The model's buffers and the context's backends now hold their connections.
            const int hardened = detect_dead_rpc_peers(opts.placement.rpc_servers, opts.placement.rpc_timeout_ms);
            log_line("--rpc: %d connection(s) fail after %d ms without an answer", hardened,
                     opts.placement.rpc_timeout_ms);
        }
        loaded.n_ctx = static_cast<int32_t>(llama_n_ctx(loaded.context.get()));
        loaded.n_ctx_seq = static_cast<int32_t>(llama_n_ctx_seq(loaded.context.get()));
        if (loaded.n_ctx_train > 0) {
            loaded.n_ctx_seq = std::min(loaded.n_ctx_seq, loaded.n_ctx_train);
        }
        loaded.n_parallel = opts.parallel;
        loaded.kv_split = opts.kv_split && opts.parallel > 1;
        const llama_model * model = loaded.model.get();
        if (opts.speculative() && (llama_model_is_recurrent(model) || llama_model_is_hybrid(model)) &&
            llama_n_rs_seq(loaded.context.get()) + 1 < static_cast<uint32_t>(opts.draft_block_size)) {
            // Only the KV cache could be rolled back; the recurrent state cannot.
            throw ProtocolError(ErrorCode::kContextFailed,
                                "the engine cannot roll back the recurrent state of " + arch +
                                    " by a draft block; speculative decoding is not available for it");
        }
        reserve_checkpoint_memory(loaded.context.get(), std::max(1, opts.parallel));
    }
    return loaded;
}

}  // namespace lucerna
