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
#include "engine/token_tree.h"
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

    // Creates the draft context over `target`, with a sequence for each of the target's
    // (--parallel, one KV pool as the target's), and turns on the capture of the
    // target's extract-layer inputs. Throws context_failed (also when the draft does not fit the
    // target: other hidden size, or extract layers the target does not have).
    void attach(llama_context * target, const DaemonOptions & opts, int32_t block_size);
    // Drops the draft context; must run before the target's context is freed.
    void detach();
    bool attached() const { return static_cast<bool>(context_); }

    // Rows of one target decode that stay committed: batch rows [first_row, first_row +
    // n_rows) are sequence `seq`'s positions pos0 .. pos0 + n_rows - 1. (The engine hands
    // the captured layer inputs back in batch order, whatever micro-batches it split the
    // batch into: llama_context::output_reorder.)
    struct CommittedRows {
        int32_t first_row = 0;
        int32_t n_rows = 0;
        llama_pos pos0 = 0;
        llama_seq_id seq = 0;
    };
    // The target just decoded a batch: ingest the features of these rows, every
    // sequence's in as few draft batches as fit. Throws decode_failed.
    void ingest(llama_context * target, const std::vector<CommittedRows> & rows);
    void ingest(llama_context * target, int32_t first_row, int32_t n_rows, llama_pos pos0) {
        ingest(target, {CommittedRows{first_row, n_rows, pos0, 0}});
    }

    // One sequence's block to denoise: `n_draft` proposals go to `out` for the positions
    // after `last`, which sits at `pos` (the first position the draft holds no features
    // for in sequence `seq`).
    struct Block {
        llama_seq_id seq = 0;
        llama_token last = 0;
        llama_pos pos = 0;
        int32_t n_draft = 0;
        std::vector<llama_token> * out = nullptr;
        // A tree verify's block (--draft-tree): also each position's `width` most likely
        // tokens with their log-probabilities, best first (out gets the first of each).
        std::vector<std::vector<TreeCandidate>> * candidates = nullptr;
        int32_t width = 0;
    };
    // Denoises every block in one draft batch (the engine masks each sequence to its own
    // cells). Throws decode_failed.
    void propose(const std::vector<Block> & blocks);
    void propose(llama_token last, llama_pos pos, int32_t n_draft, std::vector<llama_token> & out) {
        propose({Block{0, last, pos, n_draft, &out}});
    }

    // Forget sequence `seq` (a new sequence starts there), or every sequence.
    void clear(llama_seq_id seq);
    void clear();
    // Forget every position of `seq` from `n_tokens` on (the target's sequence was cut
    // back to its first `n_tokens`); the draft is attention-only, so this is exact.
    void truncate(int32_t n_tokens, llama_seq_id seq = 0);
    // Sequence `to` takes `from`'s first `n_tokens` positions (the target shared that
    // prefix between them, PROTOCOL.md 9.7).
    void share(llama_seq_id from, llama_seq_id to, int32_t n_tokens);

    // Whether the cache holds features for every position of the live sequence `seq`;
    // false after a restore from a snapshot that carried no draft state (the draft then
    // only knows what was decoded after it, which lowers acceptance but changes no token).
    bool complete(llama_seq_id seq = 0) const;
    // Every sequence (the draft was loaded while the target held sequences).
    void mark_incomplete();

    // Sequence `seq`'s draft state (its KV cells) for snapshots; empty when incomplete.
    std::vector<uint8_t> save_state(llama_seq_id seq = 0) const;
    // Returns false (and leaves `seq` cleared and incomplete) if it cannot be loaded.
    bool load_state(const std::vector<uint8_t> & state, llama_seq_id seq = 0);

    uint64_t model_bytes() const;

private:
    DflashDraft() = default;

    llama_model_ptr model_;
    // The draft's picks on its device (the engine's backend sampling), one sampler per
    // sequence: the argmax (chain steps) or the top candidates (--draft-tree,
    // engine/candidate_sampler.h), so only those come back, not block x n_vocab logits.
    // Before the context, which borrows them.
    std::vector<llama_sampler_ptr> samplers_;
    llama_context_ptr context_;
    llama_batch_ext_ptr batch_;
    std::vector<int32_t> layer_ids_;  // target layers whose inputs the draft reads
    int32_t n_embd_target_ = 0;
    llama_token mask_token_ = 0;
    bool causal_ = false;
    std::vector<bool> complete_;   // per sequence
    std::vector<float> features_;  // one ingest batch, rows of n_layers * n_embd_target
};

}  // namespace lucerna
