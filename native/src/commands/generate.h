// The generation path that `generate` and `restore` share (PROTOCOL.md 5.1, 5.5):
// option parsing, chunked prefill with inline snapshots, and the decode loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/session.h"
#include "engine/sampling.h"
#include "engine/snapshots.h"
#include "llama-cpp.h"
#include "wire/wire.h"

namespace lucerna {

struct GenerateRequest {
    std::vector<int32_t> prompt;
    int32_t n_gen = 0;
    SamplingParams sampling;
    std::vector<int32_t> stop;
    bool ignore_eos = false;
    llama_sampler_ptr grammar;  // null: unconstrained
    int32_t snap_pos = 0;       // snap=L:S; 0: none
    int32_t snap_slot = -1;
    // reuse=0|1: start from the longest prefix of the prompt whose state the daemon holds
    // (PROTOCOL.md 5.10); `restore` names its prefix instead.
    bool reuse = true;
    // marks=L,L,...: prompt positions where the prefill splits and, with reuse, keeps a
    // checkpoint (ascending, each in 1 .. n_prompt).
    std::vector<int32_t> marks;
    // logprobs=K: after each written token, its log-probability and the K most likely
    // alternatives (PROTOCOL.md 5.1); -1: off, the stream carries bare ids.
    int32_t logprobs = -1;
    // prompt_logprobs=1 (`generate` only, needs logprobs=K): the prefill computes logits
    // for every prompt position and writes one record per prompt token after the first,
    // before the generated tokens' (PROTOCOL.md 5.1); it starts from an empty sequence,
    // since held state has no logits for the positions it covers. n_gen may then be 0.
    bool prompt_logprobs = false;
};

// Parses `<ids> <n_gen> [options]` given as words. Validation order: option values,
// token source, empty prompt, token range, context size, grammar. Throws ProtocolError.
GenerateRequest parse_generate_request(const Session & session, const CommandLine & cmd, const std::string & ids,
                                       const std::string & n_gen, const char * usage);

// Prefills `req.prompt` and decodes, streaming each token; returns the reply line of
// `command`. With `from`, the sequence starts as that snapshot (its tokens must be a
// prefix of the prompt, checked by the caller) and only the rest is prefilled;
// otherwise it starts empty.
std::string run_generation(Session & session, const GenerateRequest & req, uint64_t generate_seq,
                           const char * command, const Snapshot * from);

}  // namespace lucerna
