// The DFlash block-diffusion draft (PROTOCOL.md 5.9), driven the way the engine's own
// `draft-dflash` speculative type drives it (common/speculative.cpp), but owned here
// because our decode loop, rollback and snapshots are our own.
//
// How the draft sees the target. The draft is conditioned on target hidden states: for
// every committed position, the inputs of a few target layers (the draft's
// `target_layers`, e.g. 5 of 64) side by side. The target context captures them for
// every row of every decode (llama_set_embeddings_layer_inp); after each target decode
// we hand the rows of the positions that stay committed to the draft, which fuses them
// (its `fc` + norm) and writes K/V for those positions into its own KV cache (an
// "embedding batch" through llama_process). So the draft's cache always mirrors the
// target's committed sequence, position for position.
//
// Proposing. A block [last committed token, <mask> x (block - 1)] at the positions right
// after the committed ones is decoded non-causally against that cache; the argmax of
// each mask position is a proposal. The block's own K/V land in the cache too, so they
// are removed right after (seq_rm), before the verified positions' real features come.
//
// The draft shares the target's token embeddings and LM head (a full-vocabulary draft
// carries neither); the engine reads them through ctx_other, so the draft context only
// exists while the target's does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/options.h"
#include "llama-cpp.h"
#include "llama.h"

namespace lucerna {

class DflashDraft {
public:
    // Loads the draft GGUF (architecture `dflash`) on the target's devices. Throws
    // model_not_found, wrong_arch or load_failed.
    static std::unique_ptr<DflashDraft> load(const DaemonOptions & opts);

    // dflash.block_size of a draft GGUF without loading it (16 when the key is absent,
    // the engine's default). Throws model_not_found / load_failed / wrong_arch.
    static int32_t read_block_size(const std::string & path);

    DflashDraft(const DflashDraft &) = delete;
    DflashDraft & operator=(const DflashDraft &) = delete;
    ~DflashDraft();

    // Creates the draft context over `target` and turns on the capture of the target's
    // extract-layer inputs. Throws context_failed (also when the draft does not fit the
    // target: other hidden size, or extract layers the target does not have).
    void attach(llama_context * target, const DaemonOptions & opts, int32_t block_size);
    // Drops the draft context; must run before the target's context is freed.
    void detach();
    bool attached() const { return static_cast<bool>(context_); }

    // The target just decoded a batch; its rows [first_row, first_row + n_rows) are the
    // positions pos0 .. pos0 + n_rows - 1, and they stay committed: ingest their features.
    // Throws decode_failed.
    void ingest(llama_context * target, int32_t first_row, int32_t n_rows, llama_pos pos0);

    // Up to `n_draft` proposals for the positions after `last`, which sits at `pos` (the
    // first position the draft holds no features for). Throws decode_failed.
    void propose(llama_token last, llama_pos pos, int32_t n_draft, std::vector<llama_token> & out);

    // Forget everything (a new sequence starts).
    void clear();
    // Forget every position from `n_tokens` on (the target's sequence was cut back to
    // its first `n_tokens`); the draft is attention-only, so this is exact.
    void truncate(int32_t n_tokens);

    // Whether the cache holds features for every position of the live sequence; false
    // after a restore from a snapshot that carried no draft state (the draft then only
    // knows what was decoded after it, which lowers acceptance but changes no token).
    bool complete() const { return complete_; }
    void mark_incomplete() { complete_ = false; }

    // The draft's sequence state (its KV cache) for snapshots; empty when incomplete.
    std::vector<uint8_t> save_state() const;
    // Returns false (and leaves the draft cleared and incomplete) if it cannot be loaded.
    bool load_state(const std::vector<uint8_t> & state);

    uint64_t model_bytes() const;

private:
    DflashDraft() = default;

    llama_model_ptr model_;
    // Argmax on the draft's device (the engine's backend sampling): only the proposed ids
    // come back, not block x n_vocab logits. Before the context, which borrows it.
    llama_sampler_ptr greedy_;
    llama_context_ptr context_;
    llama_batch_ext_ptr batch_;
    std::vector<int32_t> layer_ids_;  // target layers whose inputs the draft reads
    int32_t n_embd_target_ = 0;
    llama_token mask_token_ = 0;
    bool causal_ = false;
    bool complete_ = true;
    std::vector<float> features_;  // one ingest chunk, rows of n_layers * n_embd_target
};

}  // namespace lucerna
