#include "commands/tree_verify.h"

#include <string>

#include "commands/emit.h"
#include "engine/sampling.h"
#include "wire/errors.h"

namespace lucerna {

namespace {

// Drops the branch sequences 1..n_branches when the step ends, however it ends.
class BranchSequences {
public:
    BranchSequences(llama_memory_t memory, int32_t n_branches) : memory_(memory), n_branches_(n_branches) {}
    ~BranchSequences() {
        for (int32_t b = 0; b < n_branches_; ++b) {
            llama_memory_seq_rm(memory_, b + 1, -1, -1);
        }
    }
    BranchSequences(const BranchSequences &) = delete;
    BranchSequences & operator=(const BranchSequences &) = delete;

private:
    llama_memory_t memory_;
    int32_t n_branches_;
};

}  // namespace

int32_t tree_step_cells(const TokenTree & tree) {
    return static_cast<int32_t>(tree.branches().size()) * (tree.depth() + 1);
}

TreeStepResult verify_tree(llama_context * ctx, Batch & batch, const TokenTree & tree, llama_token last, llama_pos n,
                           TokenPicker & picker, TokenEmitter & emitter, bool context_argmax) {
    llama_memory_t memory = llama_get_memory(ctx);
    const auto & nodes = tree.nodes();
    const auto & branches = tree.branches();
    const auto n_branches = static_cast<int32_t>(branches.size());
    const int32_t width = tree.depth() + 1;  // rows per branch
    BranchSequences cleanup(memory, n_branches);

    batch.clear();
    for (int32_t b = 0; b < n_branches; ++b) {
        const auto & path = branches[static_cast<size_t>(b)];
        llama_memory_seq_cp(memory, 0, b + 1, -1, -1);
        batch.add(last, n, /*want_logits =*/true, b + 1);
        for (int32_t i = 1; i < width; ++i) {
            const bool on_path = static_cast<size_t>(i) <= path.size();
            batch.add(on_path ? nodes[static_cast<size_t>(path[static_cast<size_t>(i - 1)])].token : last, n + i,
                      /*want_logits =*/true, b + 1);
        }
    }
    const int32_t rc = llama_decode(ctx, batch.get());
    if (rc != 0) {
        throw ProtocolError(ErrorCode::kDecodeFailed,
                            "llama_decode failed during a tree verify step (code " + std::to_string(rc) + ")");
    }

    TreeStepResult result;
    result.committed.push_back(last);
    int32_t branch = 0;
    int32_t node = -1;  // the root: the pending token
    int32_t depth = 0;  // rows of the branch committed before this pick
    while (true) {
        const int32_t row = branch * width + depth;
        const EmittedPick picked = pick_and_emit(picker, emitter, ctx, row, context_argmax,
                                                 [&] { return llama_get_logits_ith(ctx, row); });
        result.more = picked.more;
        if (!result.more) {
            break;
        }
        result.next = *picked.token;
        const int32_t child = depth + 1 < width ? tree.child(node, *picked.token) : -1;
        if (child < 0) {
            break;
        }
        node = child;
        branch = nodes[static_cast<size_t>(child)].branch;
        result.committed.push_back(*picked.token);
        ++depth;
    }
    result.accepted = depth;
    result.first_row = branch * width;

    // The branch's rows 0..depth are committed; it becomes the live sequence.
    const llama_seq_id kept_seq = branch + 1;
    if (depth + 1 < width && !llama_memory_seq_rm(memory, kept_seq, n + depth + 1, -1)) {
        throw ProtocolError(ErrorCode::kDecodeFailed, "the engine could not roll a tree branch back to position " +
                                                          std::to_string(n + depth + 1));
    }
    llama_memory_seq_cp(memory, kept_seq, 0, -1, -1);
    return result;
}

}  // namespace lucerna
