#include "engine/prefix_reuse.h"

#include <algorithm>
#include <new>
#include <utility>

#include "engine/engine.h"
#include "engine/log.h"
#include "engine/state_memory.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

int32_t common_prefix(const std::vector<int32_t> & a, const std::vector<int32_t> & b) {
    const auto n = std::min(a.size(), b.size());
    return static_cast<int32_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
                                a.begin());
}

void clear_all(llama_context * ctx, LiveSequence & live, DflashDraft * draft, llama_seq_id seq) {
    clear_sequence(ctx, seq);
    live.clear();
    if (draft != nullptr) {
        draft->clear(seq);
    }
}

// Cuts an attention-only sequence back to its first `n_tokens` (nothing when it holds no
// more). False when the engine refuses: the sequence is then empty.
bool cut_back(llama_context * ctx, LiveSequence & live, DflashDraft * draft, llama_seq_id seq, int32_t n_tokens) {
    if (n_tokens >= live.size()) {
        return true;
    }
    if (!llama_memory_seq_rm(llama_get_memory(ctx), seq, n_tokens, -1)) {
        clear_all(ctx, live, draft, seq);
        return false;
    }
    live.truncated(n_tokens);
    if (draft != nullptr) {
        draft->truncate(n_tokens, seq);
    }
    return true;
}

// What an attention-only state sharing `common` tokens with a prompt of `n_prompt` gives
// once cut back: a prompt held entirely still prefills its last token, for its logits.
int32_t cut_reuse(int32_t common, int32_t n_prompt) {
    return std::min(common, n_prompt - 1);
}

// The index of the longest checkpoint a prompt of `n_prompt` sharing `common` tokens can
// resume from (one at the prompt's end needs its logits); -1 when none.
int32_t best_checkpoint(const std::vector<Checkpoint> & checkpoints, int32_t common, int32_t n_prompt) {
    int32_t best = -1;
    for (size_t i = 0; i < checkpoints.size(); ++i) {
        const Checkpoint & c = checkpoints[i];
        const bool usable = c.n_tokens <= common && (c.n_tokens < n_prompt || !c.logits.empty());
        if (usable && (best < 0 || c.n_tokens > checkpoints[static_cast<size_t>(best)].n_tokens)) {
            best = static_cast<int32_t>(i);
        }
    }
    return best;
}

// The best reuse the live sequence offers for `prompt` (kNone when nothing).
ReusedPrefix from_live(llama_context * ctx, const LiveSequence & live, const std::vector<int32_t> & prompt,
                       int32_t limit) {
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    const int32_t common = std::min(common_prefix(live.tokens(), prompt), limit);
    if (common == 0) {
        return {};
    }
    if (common == live.size() && (common < n_prompt || live.has_logits())) {
        // The prompt extends the live sequence, or is it and its logits are known:
        // nothing to cut.
        return {ReusedPrefix::Source::kLive, common, -1};
    }
    if (!needs_checkpoints(llama_get_model(ctx))) {
        const int32_t n = cut_reuse(common, n_prompt);
        return n > 0 ? ReusedPrefix{ReusedPrefix::Source::kLive, n, -1} : ReusedPrefix{};
    }
    const int32_t i = best_checkpoint(live.checkpoints(), common, n_prompt);
    if (i < 0 || live.checkpoints()[static_cast<size_t>(i)].n_tokens == 0) {
        return {};
    }
    return {ReusedPrefix::Source::kCheckpoint, live.checkpoints()[static_cast<size_t>(i)].n_tokens, -1};
}

// The best slot for `prompt`: one whose tokens all start it, or, on a model whose state
// can be cut back anywhere (`cuttable`), any slot, cut back to what it shares with the
// prompt (short of the whole prompt, whose last token is prefilled for its logits): a
// repeated or regenerated request finds the conversation it repeats, reply and all.
ReusedPrefix from_slots(const SnapshotStore & slots, const std::vector<int32_t> & prompt, int32_t limit,
                        bool cuttable) {
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    ReusedPrefix best;
    for (int32_t slot = 0; slot < slots.n_slots(); ++slot) {
        const Snapshot * snapshot = slots.find(slot);
        if (snapshot == nullptr) {
            continue;
        }
        const auto n_slot = static_cast<int32_t>(snapshot->tokens.size());
        const int32_t common = std::min(common_prefix(snapshot->tokens, prompt), limit);
        int32_t n = 0;
        if (common == n_slot) {
            n = n_slot;  // all of it, no cut
        } else if (cuttable) {
            n = cut_reuse(common, n_prompt);
        }
        if (n > best.n_tokens) {
            best = {ReusedPrefix::Source::kSlot, n, slot};
        }
    }
    return best;
}

}  // namespace

bool needs_checkpoints(const llama_model * model) {
    return llama_model_is_recurrent(model) || llama_model_is_hybrid(model) || llama_model_n_swa(model) > 0;
}

ReusedPrefix reuse_prefix(llama_context * ctx, LiveSequence & live, const SnapshotStore & slots,
                          const std::vector<int32_t> & prompt, int32_t limit, DflashDraft * draft,
                          llama_seq_id seq) {
    const ReusedPrefix live_best = from_live(ctx, live, prompt, limit);
    const ReusedPrefix slot_best = from_slots(slots, prompt, limit, !needs_checkpoints(llama_get_model(ctx)));
    // The live sequence wins ties: it needs no copy.
    const ReusedPrefix best = slot_best.n_tokens > live_best.n_tokens ? slot_best : live_best;
    llama_memory_t mem = llama_get_memory(ctx);
    switch (best.source) {
        case ReusedPrefix::Source::kNone:
        case ReusedPrefix::Source::kSequence:  // prefix_offer's source: never chosen above
            clear_all(ctx, live, draft, seq);
            return {};
        case ReusedPrefix::Source::kSlot:
            load_snapshot(ctx, *slots.find(best.slot), live, draft, seq);
            // A slot that went past where the prompt leaves it (from_slots) is cut back.
            if (!cut_back(ctx, live, draft, seq, best.n_tokens)) {
                return {};
            }
            break;
        case ReusedPrefix::Source::kLive:
            if (!cut_back(ctx, live, draft, seq, best.n_tokens)) {
                return {};
            }
            break;
        case ReusedPrefix::Source::kCheckpoint: {
            const auto & checkpoints = live.checkpoints();
            const auto it = std::find_if(checkpoints.begin(), checkpoints.end(),
                                         [&](const Checkpoint & c) { return c.n_tokens == best.n_tokens; });
            // Load the uncuttable part first: it replaces the recurrent (or window) state
            // wholesale, after which cutting the attention cache at the same position is
            // a plain removal the engine always accepts.
            if (llama_state_seq_set_data_ext(ctx, it->state.data(), it->state.size(), seq,
                                             LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == 0 ||
                !llama_memory_seq_rm(mem, seq, best.n_tokens, -1)) {
                clear_all(ctx, live, draft, seq);
                throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not load a checkpoint");
            }
            const std::vector<float> logits = it->logits;  // truncated() drops later checkpoints
            live.truncated(best.n_tokens, logits);
            if (draft != nullptr) {
                draft->truncate(best.n_tokens, seq);
            }
            break;
        }
    }
    return best;
}

ReusedPrefix prefix_offer(const llama_model * model, const LiveSequence & other, const std::vector<int32_t> & prompt,
                          int32_t limit) {
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    const int32_t common = std::min(common_prefix(other.tokens(), prompt), limit);
    if (!needs_checkpoints(model)) {
        const int32_t n = cut_reuse(common, n_prompt);
        return n > 0 ? ReusedPrefix{ReusedPrefix::Source::kSequence, n, -1} : ReusedPrefix{};
    }
    const int32_t i = best_checkpoint(other.checkpoints(), common, n_prompt);
    if (i < 0 || other.checkpoints()[static_cast<size_t>(i)].n_tokens == 0) {
        return {};
    }
    return {ReusedPrefix::Source::kSequence, other.checkpoints()[static_cast<size_t>(i)].n_tokens, i};
}

void share_prefix(llama_context * ctx, LiveSequence & live, llama_seq_id seq, const LiveSequence & other,
                  llama_seq_id other_seq, const ReusedPrefix & offer) {
    clear_sequence(ctx, seq);
    live.clear();
    llama_memory_t mem = llama_get_memory(ctx);
    // Positions [0, n): the attention cells become the other sequence's and this one's
    // alike (a hybrid model copies its recurrent state too, replaced below).
    llama_memory_seq_cp(mem, other_seq, seq, 0, offer.n_tokens);
    std::vector<float> logits;
    if (offer.slot >= 0) {
        const Checkpoint & c = other.checkpoints()[static_cast<size_t>(offer.slot)];
        if (llama_state_seq_set_data_ext(ctx, c.state.data(), c.state.size(), seq,
                                         LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == 0) {
            clear_sequence(ctx, seq);
            throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not load another sequence's checkpoint");
        }
        logits = c.logits;
    }
    const auto & tokens = other.tokens();
    live.restored(std::vector<int32_t>(tokens.begin(), tokens.begin() + offer.n_tokens), logits);
}

void capture_checkpoint(llama_context * ctx, LiveSequence & live, int32_t n_vocab, llama_seq_id seq) {
    if (live.empty() || !needs_checkpoints(llama_get_model(ctx))) {
        return;
    }
    try {
        Checkpoint checkpoint;
        checkpoint.n_tokens = live.size();
        const llama_state_seq_flags flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
        checkpoint.state.resize(llama_state_seq_get_size_ext(ctx, seq, flags));
        if (llama_state_seq_get_data_ext(ctx, checkpoint.state.data(), checkpoint.state.size(), seq, flags) !=
            checkpoint.state.size()) {
            throw ProtocolError(ErrorCode::kSnapshotFailed, "the engine could not save a checkpoint");
        }
        const float * logits = live.last_logits(ctx);
        if (logits != nullptr) {
            checkpoint.logits.assign(logits, logits + n_vocab);
        }
        live.add_checkpoint(std::move(checkpoint));
    } catch (const std::bad_alloc &) {
        throw ProtocolError(ErrorCode::kSnapshotFailed, "out of host memory for a checkpoint");
    }
}

uint64_t checkpoint_bytes(const std::vector<LiveSequence> & sequences) {
    uint64_t total = 0;
    for (const LiveSequence & sequence : sequences) {
        total += sequence.checkpoint_bytes();
    }
    return total;
}

uint64_t bound_checkpoints(std::vector<LiveSequence> & sequences, uint64_t budget, const LiveSequence & taken) {
    if (budget == 0) {
        return 0;
    }
    uint64_t total = checkpoint_bytes(sequences);
    uint64_t dropped = 0;
    while (total > budget) {
        LiveSequence * victim = nullptr;
        auto later = [&taken](const LiveSequence & a, const LiveSequence & b) {
            return std::make_pair(&a == &taken, a.last_used()) > std::make_pair(&b == &taken, b.last_used());
        };
        for (LiveSequence & sequence : sequences) {
            const size_t kept = &sequence == &taken ? 1 : 0;
            if (sequence.checkpoints().size() > kept && (victim == nullptr || later(*victim, sequence))) {
                victim = &sequence;
            }
        }
        if (victim == nullptr) {
            break;
        }
        total -= victim->drop_oldest_checkpoint();
        ++dropped;
    }
    return dropped;
}

void reserve_checkpoint_memory(llama_context * ctx, int32_t n_sequences) {
    const llama_model * model = llama_get_model(ctx);
    if ((!llama_model_is_recurrent(model) && !llama_model_is_hybrid(model)) || n_sequences < 1 ||
        !state_memory_made_ahead()) {
        return;
    }
    llama_token token = 0;
    const int rc = llama_decode(ctx, llama_batch_get_one(&token, 1));
    const size_t size = rc == 0 ? llama_state_seq_get_size_ext(ctx, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) : 0;
    clear_sequence(ctx, 0);
    if (rc != 0) {
        log_line("no checkpoint memory made ahead: the engine could not decode one token to size it (code %d)", rc);
        return;
    }
    try {
        reserve_state_blocks(size, n_sequences);
    } catch (const std::bad_alloc &) {
        log_line("no more checkpoint memory made ahead: out of host memory for %d checkpoints of %zu bytes",
                 n_sequences, size);
    }
}

}  // namespace lucerna
