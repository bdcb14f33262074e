// Running the DFlash test draft against its qwen35 target, the way speculative
// decoding drives it: the target decodes a prompt with its extract layers' inputs
// captured, the draft ingests those features, then denoises one block
// [last target token, <mask> x (block_size - 1)] into draft tokens.
#pragma once

#include <string>
#include <vector>

namespace lucerna::mkmodels {

struct DraftCheck {
    bool ok = false;
    std::vector<int> drafted;  // greedy draft tokens for the masked block positions
    std::string note;
};

DraftCheck run_draft_block(const std::string & target_path, const std::string & draft_path);

}  // namespace lucerna::mkmodels
