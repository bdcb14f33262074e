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
// The sequences share one KV pool (engine.cpp). When a step finds no room in it
// (llama_decode returns 1), the scheduler frees some and builds the step again: first
// the state idle sequences keep for prefix reuse, then it preempts the youngest
// generation: its sequence state (KV cells and recurrent state, with the logits of its
// last position) is copied to host memory and its cells freed. The oldest generation is
// never preempted, so one always advances. A preempted generation resumes, oldest
// first, when the pool has room for it again (its snapshot loaded back, any token it
// had picked and written decoded first); until then no generation admitted after it
// starts its prefill. Nothing written is taken back and nothing is dropped; its summary
// is as if it had run unbroken (PROTOCOL.md 9.6).
//
// Speculative decoding (PROTOCOL.md 9.5): a decoding sequence that runs prompt lookup,
// the DFlash draft or the oracle puts its pending token and its proposals in the step's
// batch (a verify block, 5.9) instead of the pending token alone; after the decode it
// keeps the longest agreeing prefix and rolls back the rest of its own sequence (seq_rm:
// its KV cells, and the recurrent state the engine keeps per sequence and per position
// of the block, n_rs_seq). The draft holds a sequence per lane: the blocks of every
// sequence that drafts are denoised in one draft batch before the step, and the
// features of every row the step commits are ingested in one draft batch after it.
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
#include "engine/speculative.h"

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

    // Shared prefix: when another sequence holds a longer prefix of r's prompt than r's
    // own sequence kept (its live tokens, or for a hybrid or sliding-window model one of
    // its checkpoints), r's sequence takes it from there (engine/prefix_reuse.h
    // share_prefix): concurrent conversations with one system prompt prefill it once
    // and hold its attention KV once (PROTOCOL.md 9.7).
    void share_from_other_lane(Running & r, int32_t limit);
    void finish_prefill(Running & r);
    // Writes the end record and returns the done line; releases the lane.
    std::string finish(Running & r);
    std::string fail(Running & r, ErrorCode code, const std::string & detail);
    // With --parallel 1 a daemon with an attached draft or the oracle runs each
    // generation whole (run_generation), in one step: the solo speculative loop, whose
    // verify batches keep one shape (decode_speculative.h).
    bool runs_whole();
    // Empties a lane: its sequence in the target, its live tokens, its draft cells.
    void clear_lane(int32_t lane);
    std::string run_speculative(Running & r);
    // Prompt lookup with several sequences (PROTOCOL.md 9.5): each decoding sequence
    // that runs it carries its verify block (its pending token and its proposals) in the
    // step's one batch beside the other sequences' rows. propose() fills r.proposals for
    // this step (none: a plain one-row decode); verify() picks from the block's rows after
    // the decode, commits the longest agreeing prefix, rolls the rest of r's sequence back
    // and returns whether r goes on (false: it ended, finish it).
    void propose(Running & r);
    bool verify(Running & r);
    // The DFlash draft with several sequences (PROTOCOL.md 9.5): every sequence that
    // propose() left wanting the draft gets its block from one draft batch, and after the
    // target's decode one draft batch takes the features of every committed row, each
    // at its sequence and position (`owners`: whose rows; they fail if it throws).
    void draft_proposals();
    void ingest_committed(const std::vector<DflashDraft::CommittedRows> & rows, const std::vector<Running *> & owners,
                          std::vector<std::string> & done);
    // Preemption (above): frees room in the pool for the step; false when nothing can be
    // freed. A victim whose state cannot be copied out fails instead (its done line goes
    // to `done`), which frees its cells too.
    bool make_room(std::vector<std::string> & done);
    void preempt(Running & r);
    // Empties one sequence that no generation runs on (its state kept for prefix reuse);
    // false when there is none.
    bool evict_idle_lane();
    void resume_preempted();
    // Whether no generation admitted before `r` is preempted.
    bool before_preempted(const Running & r) const;
    // KV cells the sequences hold (one per token of each lane's live sequence).
    int64_t cells_held() const;

    Session & session_;
    Batch batch_;
    std::vector<std::unique_ptr<Running>> running_;  // in admission order
};

}  // namespace lucerna
