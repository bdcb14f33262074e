// Continuous batching (PROTOCOL.md 9): the protocol 2 generations running on the
// --parallel lanes of one engine context, advanced together one step at a time.
//
// A step is one llama_decode. It carries the next token of every sequence that is
// decoding (each picked from its own logits with its own sampler, grammar and stops)
// and, in the room left, prefill chunks of sequences still reading their prompt, oldest
// first, at most --chunk prompt tokens in all: a long prompt arriving costs the running
// streams one chunk's worth of time per step, never its whole prefill. Chunks are cut
// exactly where a solo run cuts them (prefill_chunk_end), so a sequence's state does not
// depend on which others shared its steps as far as the engine's kernels allow (9.4).
//
// The main loop (daemon.cpp) runs a step whenever generations are running and no
// command is waiting; commands that may run alongside are answered between steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commands/generate.h"
#include "daemon/session.h"
#include "commands/emit.h"
#include "engine/engine.h"
#include "engine/prefix_reuse.h"
#include "engine/sampling.h"
#include "engine/snapshots.h"

namespace lucerna {

class BatchScheduler {
public:
    explicit BatchScheduler(Session & session);
    ~BatchScheduler();
    BatchScheduler(const BatchScheduler &) = delete;
    BatchScheduler & operator=(const BatchScheduler &) = delete;

    bool busy() const { return !running_.empty(); }
    bool lane_busy(int32_t lane) const;

    // Starts generation `req` (protocol 2: req.seq is its lane, which must be free) from
    // the lane's held state, a snapshot slot's (`from`, restore) or an empty sequence,
    // exactly as a protocol 1 generate would (5.10). Its tokens come from later steps.
    // Throws ProtocolError before anything is written; the lane is then empty or as it was.
    void admit(GenerateRequest req, uint64_t generate_seq, const char * command, std::shared_ptr<const Snapshot> from);

    // One step. Returns the `done <seq> ...` lines of the generations that ended in it,
    // each after its end record was written to the stream.
    std::vector<std::string> step();

private:
    struct Running;

    void finish_prefill(Running & r);
    // Writes the end record and returns the done line; releases the lane.
    std::string finish(Running & r);
    std::string fail(Running & r, ErrorCode code, const std::string & detail);
    // A speculative daemon serves one sequence (--parallel 1): its generation runs whole.
    std::string run_speculative(Running & r);

    Session & session_;
    Batch batch_;
    std::vector<std::unique_ptr<Running>> running_;  // in admission order
};

}  // namespace lucerna
