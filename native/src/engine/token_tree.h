// The candidate tree of one tree-verify step (DDTree, PROTOCOL.md 5.9, --draft-tree): from
// a proposer's top candidates for each position after the last committed token, the
// most likely continuations, best first, as a tree of at most `budget` nodes whose
// root-to-leaf paths (branches) number at most `max_branches`.
//
// A node's score is the sum of the log-probabilities of the candidates on its path, each
// position's taken on its own (a DFlash block proposes every position at once, so its
// candidates at one position do not depend on the choice at the one before). Best-first:
// a node enters the tree only after its parent and its higher-ranked siblings, so the
// tree is the `budget` highest-scoring paths' prefixes, the way DDTree builds it.
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace lucerna {

struct TreeCandidate {
    llama_token token = 0;
    float logprob = 0.0f;
};

// The order candidates are ranked in: the more likely first, ties to the lower id.
inline bool ranks_before(const TreeCandidate & a, const TreeCandidate & b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.token < b.token;
}

// The `width` most likely tokens of a logits row, best first (ties: the lower id), with
// their log-probabilities under the row's softmax.
void top_candidates(const float * logits, int32_t n_vocab, int32_t width, std::vector<TreeCandidate> & out);

class TokenTree {
public:
    struct Node {
        llama_token token = 0;
        int32_t parent = -1;  // -1: a child of the root (the last committed token)
        int32_t depth = 1;    // 1: the first position after the root
        int32_t branch = 0;   // one branch through this node (the first that reached it)
    };

    // `candidates[d]`: the candidates for depth d + 1, most likely first. Keeps at most
    // `budget` nodes and `max_branches` branches; empty candidates give an empty tree.
    static TokenTree build(const std::vector<std::vector<TreeCandidate>> & candidates, int32_t budget,
                           int32_t max_branches);

    const std::vector<Node> & nodes() const { return nodes_; }
    // Each branch's nodes, root's child first; the branches in the order their leaves
    // entered the tree (branch 0 holds every node's rank-0 path as far as it goes).
    const std::vector<std::vector<int32_t>> & branches() const { return branches_; }
    // The deepest branch's length (0 for an empty tree).
    int32_t depth() const;
    // The child of `node` (-1: the root) that holds `token`, or -1.
    int32_t child(int32_t node, llama_token token) const;

private:
    std::vector<Node> nodes_;
    std::vector<std::vector<int32_t>> branches_;
};

}  // namespace lucerna
