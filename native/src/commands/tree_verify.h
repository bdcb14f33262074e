// One tree verify step (DDTree, PROTOCOL.md 5.9, --draft-tree): the candidate tree of
// engine/token_tree.h checked by the target in one decode, its branches as sequences.
//
// The live sequence is sequence 0. Each branch b (a root-to-leaf path of the tree) gets
// sequence b + 1, a copy of sequence 0 (llama_memory_seq_cp: its attention cells are
// shared, not copied; its Gated DeltaNet and conv state is copied when the branch first
// decodes), and the batch carries every branch as its own block: the pending token, then
// the branch's tokens, padded with the pending token to the deepest branch's length
// (the engine's recurrent layers take sequences of one length per micro-batch). So every
// node's row sees exactly its ancestors, in the attention layers and in the recurrent
// ones, at the cost of decoding a prefix once per branch that shares it.
//
// Picking walks the tree: the pick at a node's row is committed, as in a chain step, and
// the walk goes on at the child that holds that pick, on a branch through it, until no
// child does. Every pick is one pick of the request's own picker, in order, from logits
// conditioned on exactly the committed prefix, so the step is lossless for the same
// reason a chain step is (commands/decode_speculative.h). The branch the walk ended on is
// rolled back to its committed rows (seq_rm: engine snapshot n_rs_seq) and becomes
// sequence 0 (seq_cp, which engine patch 0106 makes carry that rollback); every branch
// sequence is then dropped.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "engine/token_tree.h"

namespace lucerna {

class TokenPicker;
class TokenEmitter;

struct TreeStepResult {
    std::vector<int32_t> committed;  // the tokens now at positions n, n + 1, ...: `last`, then the accepted ones
    int32_t first_row = 0;           // the batch row of the committed branch's first row
    int32_t accepted = 0;            // proposals accepted (committed.size() - 1)
    bool more = true;                // false: the emitter stopped the request
    llama_token next = 0;            // the new pending token, when `more`
};

// Cells a tree step decodes (every branch padded to the deepest one, plus its root row).
int32_t tree_step_cells(const TokenTree & tree);

// Decodes `tree` after the pending token `last` at position `n` of sequence 0. The
// context must have tree.branches().size() sequences after sequence 0, and room for
// tree_step_cells(tree) cells. Throws ProtocolError decode_failed; the branch sequences
// are gone whatever happens. `context_argmax`: the context takes each row's argmax in its
// graph (TokenPicker::pick_row).
TreeStepResult verify_tree(llama_context * ctx, Batch & batch, const TokenTree & tree, llama_token last, llama_pos n,
                           TokenPicker & picker, TokenEmitter & emitter, bool context_argmax);

}  // namespace lucerna
