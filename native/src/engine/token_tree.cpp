#include "engine/token_tree.h"

#include <algorithm>
#include <cmath>
#include <queue>

namespace lucerna {

void top_candidates(const float * logits, int32_t n_vocab, int32_t width, std::vector<TreeCandidate> & out) {
    const int32_t k = std::max(1, std::min(width, n_vocab));
    out.clear();
    float max_logit = logits[0];
    for (int32_t id = 0; id < n_vocab; ++id) {
        max_logit = std::max(max_logit, logits[id]);
        const TreeCandidate here{id, logits[id]};
        if (static_cast<int32_t>(out.size()) < k) {
            out.push_back(here);
            std::push_heap(out.begin(), out.end(), ranks_before);  // the worst kept on top
        } else if (ranks_before(here, out.front())) {
            std::pop_heap(out.begin(), out.end(), ranks_before);
            out.back() = here;
            std::push_heap(out.begin(), out.end(), ranks_before);
        }
    }
    double sum = 0.0;
    for (int32_t id = 0; id < n_vocab; ++id) {
        sum += std::exp(static_cast<double>(logits[id] - max_logit));
    }
    const auto log_z = static_cast<float>(static_cast<double>(max_logit) + std::log(sum));
    std::sort_heap(out.begin(), out.end(), ranks_before);
    for (TreeCandidate & candidate : out) {
        candidate.logprob -= log_z;
    }
}

namespace {

// A node that may enter the tree next: the `rank`-th candidate at `depth`, under `parent`.
struct Frontier {
    float score = 0.0f;
    int32_t parent = -1;
    int32_t depth = 1;
    int32_t rank = 0;
    int64_t order = 0;  // ties go to the one offered first, so the build is deterministic

    bool operator<(const Frontier & other) const {  // std::priority_queue pops the largest
        return score != other.score ? score < other.score : order > other.order;
    }
};

}  // namespace

TokenTree TokenTree::build(const std::vector<std::vector<TreeCandidate>> & candidates, int32_t budget,
                           int32_t max_branches) {
    TokenTree tree;
    const auto n_depth = static_cast<int32_t>(candidates.size());
    if (n_depth == 0 || candidates[0].empty() || budget <= 0 || max_branches <= 0) {
        return tree;
    }
    std::vector<int32_t> n_children;  // per node
    int32_t root_children = 0;
    int32_t leaves = 0;
    int64_t order = 0;
    std::priority_queue<Frontier> frontier;
    frontier.push({candidates[0][0].logprob, -1, 1, 0, order++});
    while (!frontier.empty() && static_cast<int32_t>(tree.nodes_.size()) < budget) {
        const Frontier next = frontier.top();
        frontier.pop();
        int32_t & siblings = next.parent < 0 ? root_children : n_children[static_cast<size_t>(next.parent)];
        // Under a node that has a child already, a node starts a branch of its own.
        const bool new_branch = siblings > 0;
        if (new_branch && leaves == max_branches) {
            continue;  // and so would its lower-ranked siblings: none of them is offered
        }
        leaves += new_branch || next.parent < 0 ? 1 : 0;
        ++siblings;
        const auto id = static_cast<int32_t>(tree.nodes_.size());
        const TreeCandidate & picked = candidates[static_cast<size_t>(next.depth - 1)][static_cast<size_t>(next.rank)];
        tree.nodes_.push_back({picked.token, next.parent, next.depth, 0});
        n_children.push_back(0);
        const float base = next.score - picked.logprob;  // the parent's score
        const auto & here = candidates[static_cast<size_t>(next.depth - 1)];
        if (static_cast<size_t>(next.rank + 1) < here.size()) {
            frontier.push({base + here[static_cast<size_t>(next.rank + 1)].logprob, next.parent, next.depth,
                           next.rank + 1, order++});
        }
        if (next.depth < n_depth && !candidates[static_cast<size_t>(next.depth)].empty()) {
            frontier.push({next.score + candidates[static_cast<size_t>(next.depth)][0].logprob, id, next.depth + 1, 0,
                           order++});
        }
    }
    // Branches in depth-first order, children by rank (the order they entered).
    std::vector<std::vector<int32_t>> children(tree.nodes_.size());
    std::vector<int32_t> roots;
    for (int32_t id = 0; id < static_cast<int32_t>(tree.nodes_.size()); ++id) {
        const int32_t parent = tree.nodes_[static_cast<size_t>(id)].parent;
        (parent < 0 ? roots : children[static_cast<size_t>(parent)]).push_back(id);
    }
    std::vector<int32_t> path;
    auto walk = [&](auto & self, int32_t id) -> void {
        path.push_back(id);
        const auto & below = children[static_cast<size_t>(id)];
        if (below.empty()) {
            tree.branches_.push_back(path);
        }
        for (const int32_t child : below) {
            self(self, child);
        }
        path.pop_back();
    };
    for (const int32_t id : roots) {
        walk(walk, id);
    }
    for (size_t b = tree.branches_.size(); b-- > 0;) {  // the first branch through a node wins
        for (const int32_t id : tree.branches_[b]) {
            tree.nodes_[static_cast<size_t>(id)].branch = static_cast<int32_t>(b);
        }
    }
    return tree;
}

int32_t TokenTree::depth() const {
    int32_t deepest = 0;
    for (const auto & branch : branches_) {
        deepest = std::max(deepest, static_cast<int32_t>(branch.size()));
    }
    return deepest;
}

int32_t TokenTree::child(int32_t node, llama_token token) const {
    for (int32_t id = 0; id < static_cast<int32_t>(nodes_.size()); ++id) {
        const Node & n = nodes_[static_cast<size_t>(id)];
        if (n.parent == node && n.token == token) {
            return id;
        }
    }
    return -1;
}

}  // namespace lucerna
