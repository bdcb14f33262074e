// The generation path that `generate` and `restore` share (PROTOCOL.md 5.1, 5.5):
// option parsing, chunked prefill with inline snapshots, and the decode loop.
#pragma once

#include <cstdint>
#include <memory>
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
    // seq=S (protocol 2, PROTOCOL.md 9): the sequence (lane) it runs on, its stream
    // records framed with S; -1: protocol 1, bare values on the stream and lane 0.
    int32_t seq = -1;
    // prompt_logprobs=1 (`generate` only, needs logprobs=K): the prefill computes logits
    // for every prompt position and writes one record per prompt token after the first,
    // before the generated tokens' (PROTOCOL.md 5.1); it starts from an empty sequence,
    // since held state has no logits for the positions it covers. n_gen may then be 0.
    bool prompt_logprobs = false;
    // lookup=0|1: prompt lookup off or on for this request (PROTOCOL.md 5.9); -1: the
    // daemon's --lookup default. 1 needs a daemon started with --lookup=opt-in or on.
    int32_t lookup = -1;
};

// Parses `<ids> <n_gen> [options]` given as words. Validation order: option values,
// token source, empty prompt, token range, context size, grammar. Throws ProtocolError.
GenerateRequest parse_generate_request(const Session & session, const CommandLine & cmd, const std::string & ids,
                                       const std::string & n_gen, const char * usage);

// seq=S: a sequence of this daemon, 0 .. --parallel - 1; throws bad_seq.
int32_t parse_seq(const Session & session, const std::string & value);

// Where the prefill chunk that starts at `pos` ends: at the next multiple of `n_chunk`,
// the inline snapshot's position or the next mark, whichever comes first, and at most
// at the prompt's end. Every run of a prompt splits it the same way (the engine's
// logits depend on the split, PROTOCOL.md 5.5), batched or not.
int32_t prefill_chunk_end(const GenerateRequest & req, int32_t pos, int64_t n_chunk);

// Whether prompt position `pos` is one of the request's marks.
bool is_mark(const GenerateRequest & req, int32_t pos);

// What the reply of a finished generation says (PROTOCOL.md 5.1, 5.5).
struct GenerationSummary {
    int32_t n_prompt = 0;
    bool restored = false;  // `restore`: n_reused instead of n_cached/cache_slot
    int32_t n_reused = 0;
    int32_t cache_slot = -1;
    int32_t n_gen = 0;
    const char * finish = "length";
    double prefill_ms = 0.0;
    double decode_ms = 0.0;
    bool snapped = false;
    const SpecCounters * spec = nullptr;  // a speculative generation's counters (5.9)
    SpecChoice choice;                    // and the proposers it ran
};
std::string summary_line(const char * command, const GenerationSummary & summary, const GenerateRequest & req);

// Protocol 2 (PROTOCOL.md 9): hands `req` to the batch scheduler on lane req.seq and
// returns the immediate `ok <command> seq=S`; its tokens, end record and done line come
// from later steps. Throws seq_busy while the lane's last generation runs.
std::string start_on_lane(Session & session, GenerateRequest req, uint64_t generate_seq, const char * command,
                          std::shared_ptr<const Snapshot> from);

// Prefills `req.prompt` and decodes, streaming each token; returns the reply line of
// `command`. With `from`, the sequence starts as that snapshot (its tokens must be a
// prefix of the prompt, checked by the caller) and only the rest is prefilled;
// otherwise it starts empty.
std::string run_generation(Session & session, const GenerateRequest & req, uint64_t generate_seq,
                           const char * command, const Snapshot * from);

}  // namespace lucerna
