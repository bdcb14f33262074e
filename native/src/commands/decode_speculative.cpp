#include "commands/decode_speculative.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "commands/emit.h"
#include "commands/tree_verify.h"
#include "daemon/session.h"
#include "engine/engine.h"
#include "engine/sampling.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

double ms_since(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

void decode_speculative(Session & session, TokenPicker & picker, TokenEmitter & emitter, Batch & batch,
                        SpecCounters & counters, const SpecChoice & choice) {
    llama_context * ctx = session.engine.context.get();
    llama_memory_t memory = llama_get_memory(ctx);
    LiveSequence & live = session.live;
    Speculator & spec = session.spec;
    DflashDraft * draft = spec.attached_draft();
    OracleProposer * oracle = choice.oracle ? spec.oracle() : nullptr;
    const int32_t block = spec.block_size();
    LookupBudget budget;
    // Greedy without a grammar takes each row's argmax from the graph (engine/engine.cpp
    // turns it on for speculative daemons): ids only, no host scan. The same rule as the
    // host's pick, on the same logits, so the same tokens (TokenPicker::pick_row).
    const bool context_argmax = session.engine.output_argmax;
    // A draft or the oracle fills every step's room, so their steps are full blocks until
    // the end of the request shrinks the room; there the batch keeps its `block` rows,
    // wherever the context has room: a shorter batch is a graph of a new shape, which the
    // engine builds afresh and runs outside the CUDA graph it captured for the full block.
    // Rows past k carry padding (the draft's further guesses, or `last` repeated): they are
    // decoded and rolled back with the rejected rows, and never picked. Prompt lookup alone
    // proposes as many tokens as it finds, and pads nothing.
    const bool fills_room = (choice.draft && draft != nullptr) || oracle != nullptr;
    const auto n_ctx = static_cast<llama_pos>(llama_n_ctx(ctx));

    std::vector<llama_token> proposals;
    // --draft-tree: candidates per position for a tree verify step (commands/tree_verify.h),
    // `tree_width` of them (a depth of the tree holds at most one node per branch).
    const int32_t tree_width = choice.tree ? session.opts.draft_tree_branches : 0;
    std::vector<std::vector<TreeCandidate>> candidates;
    std::vector<int32_t> committed;  // for the oracle: the live tokens plus `last`
    std::optional<llama_token> picked = picker.pick(live.last_logits(ctx));
    if (!emitter.emit(picked, live.last_logits(ctx))) {
        return;
    }
    llama_token last = *picked;
    while (true) {
        const llama_pos n = live.size();  // where `last` goes
        // A step commits at most k + 1 tokens; never propose past what may be written.
        const int32_t room = std::max(0, std::min(block - 1, emitter.remaining() - 1));
        const bool padded = fills_room && n + block <= n_ctx;
        proposals.clear();
        bool looked_up = false;
        if (room > 0 && (choice.lookup || oracle != nullptr)) {
            committed = live.tokens();
            committed.push_back(last);
        }
        if (room > 0 && choice.lookup && budget.propose_now()) {
            propose_from_context(committed, room, session.opts.lookup_min, proposals);
            looked_up = !proposals.empty();
        }
        candidates.clear();
        if (room > 0 && !looked_up && choice.draft && draft != nullptr) {
            const auto t_draft = std::chrono::steady_clock::now();
            draft->propose({DflashDraft::Block{0, last, n, padded ? block - 1 : room, &proposals,
                                               tree_width > 0 ? &candidates : nullptr, tree_width}});
            counters.draft_ms += ms_since(t_draft);
        }
        if (room > 0 && oracle != nullptr) {
            // Replaces the others', if they ran.
            if (tree_width > 0) {
                oracle->propose_candidates(committed, room, tree_width, session.opts.oracle_rank, candidates);
                proposals.clear();
                for (const auto & here : candidates) {
                    proposals.push_back(here[0].token);
                }
            } else {
                oracle->propose(committed, room, proposals);
            }
            looked_up = false;
        }
        if (!candidates.empty() && !looked_up) {
            candidates.resize(static_cast<size_t>(room));
            const TokenTree tree = TokenTree::build(candidates, session.opts.draft_tree, tree_width);
            if (tree.branches().size() > 1 && n + tree_step_cells(tree) <= n_ctx) {
                const TreeStepResult step = [&] {
                    const VerifyAttention attention(ctx, session.engine.verify_without_flash_attn);
                    return verify_tree(ctx, batch, tree, last, n, picker, emitter, context_argmax);
                }();
                const auto kept = static_cast<int32_t>(step.committed.size());
                live.decoded(step.committed.data(), step.committed.size(), step.first_row + kept - 1);
                if (draft != nullptr) {
                    const auto t_ingest = std::chrono::steady_clock::now();
                    draft->ingest(ctx, step.first_row, kept, n);
                    counters.draft_ms += ms_since(t_ingest);
                }
                ++counters.steps;
                ++counters.tree_steps;
                counters.proposed += tree.nodes().size();
                counters.accepted += static_cast<uint64_t>(step.accepted);
                if (!step.more) {
                    return;
                }
                last = step.next;
                continue;
            }
            // One branch (or no room for more): the chain of its tokens.
            const auto & chain = tree.branches().empty() ? std::vector<int32_t>{} : tree.branches()[0];
            proposals.clear();
            for (const int32_t node : chain) {
                proposals.push_back(tree.nodes()[static_cast<size_t>(node)].token);
            }
        }
        const auto k = static_cast<int32_t>(std::min<size_t>(proposals.size(), static_cast<size_t>(room)));
        const int32_t n_rows = padded ? block : k + 1;
        proposals.resize(static_cast<size_t>(std::max(k, n_rows - 1)), last);

        batch.clear();
        batch.add(last, n, /*want_logits =*/true);
        for (int32_t i = 0; i + 1 < n_rows; ++i) {
            batch.add(proposals[static_cast<size_t>(i)], n + 1 + i, /*want_logits =*/true);
        }
        const int32_t rc = [&] {
            const VerifyAttention attention(ctx, session.engine.verify_without_flash_attn && n_rows > 1);
            return llama_decode(ctx, batch.get());
        }();
        if (rc != 0) {
            throw ProtocolError(ErrorCode::kDecodeFailed,
                                "llama_decode failed during a verify step (code " + std::to_string(rc) + ")");
        }

        // Row r holds the logits after the token at position n + r; its pick is committed,
        // and the next row is only meaningful while that pick is the proposal there.
        int32_t row = 0;
        uint64_t accepted = 0;
        bool more = true;
        while (true) {
            const EmittedPick pick = pick_and_emit(picker, emitter, ctx, row, context_argmax,
                                                   [&] { return llama_get_logits_ith(ctx, row); });
            picked = pick.token;
            more = pick.more;
            if (more && row < k && *picked == proposals[static_cast<size_t>(row)]) {
                ++accepted;
                ++row;
                continue;
            }
            break;
        }
        if (more) {
            last = *picked;
        }
        // Rows 0..row are committed positions; everything decoded after them goes.
        const int32_t kept = row + 1;
        if (kept < n_rows && !llama_memory_seq_rm(memory, 0, n + kept, -1)) {
            throw ProtocolError(ErrorCode::kDecodeFailed, "the engine could not roll the target back to position " +
                                                              std::to_string(n + kept));
        }
        std::vector<int32_t> kept_tokens(static_cast<size_t>(kept));
        kept_tokens[0] = batch.get().token[0];
        std::copy(proposals.begin(), proposals.begin() + (kept - 1), kept_tokens.begin() + 1);
        live.decoded(kept_tokens.data(), kept_tokens.size(), row);
        if (draft != nullptr) {
            const auto t_ingest = std::chrono::steady_clock::now();
            draft->ingest(ctx, 0, kept, n);
            counters.draft_ms += ms_since(t_ingest);
        }
        if (looked_up) {
            budget.update(k, static_cast<int32_t>(accepted));
        }
        if (k > 0) {
            ++counters.steps;
            counters.proposed += static_cast<uint64_t>(k);
            counters.accepted += accepted;
        }
        if (!more) {
            return;
        }
    }
}

}  // namespace lucerna
