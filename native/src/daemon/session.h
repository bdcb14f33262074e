// What a command handler works with: the loaded model, the stream, the counters, the
// live sequence and the snapshot slots.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/args.h"
#include "daemon/cancel.h"
#include "daemon/roles.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "engine/snapshot_files.h"
#include "engine/snapshots.h"
#include "engine/speculative.h"
#include "wire/stream.h"

namespace lucerna {

class BatchScheduler;  // daemon/batch_scheduler.h

struct Stats {
    uint64_t requests = 0;       // generate and restore commands that ran (including cancelled ones)
    uint64_t tokens_prompt = 0;  // prompt tokens prefilled (reused ones are not)
    uint64_t tokens_reused = 0;  // prompt tokens taken from held state instead (PROTOCOL.md 5.10)
    uint64_t tokens_generated = 0;
    uint64_t cancelled = 0;
    uint64_t preempted = 0;  // times a generation was preempted for room in the KV pool
    uint64_t shared_prefixes = 0;  // generations that took their prefix from another sequence
    uint64_t checkpoints_dropped = 0;  // to keep the sequences' checkpoints within --checkpoint-mib
    double last_prefill_tok_s = 0.0;  // of the last generate or restore; 0 before any
    double last_decode_tok_s = 0.0;
};

struct Session {
    const RoleInfo & role;
    const DaemonOptions & opts;
    LoadedModel & engine;
    TokenStream & stream;
    CancelState & cancel;
    Speculator & spec;  // the draft and the oracle; neither when not speculating
    Stats stats;
    SnapshotStore snapshots;
    // One live sequence per --parallel lane (PROTOCOL.md 9); `live` is lane 0's, the one
    // every protocol 1 command works on.
    std::vector<LiveSequence> lanes;
    LiveSequence & live;
    // The protocol 2 generations in flight (PROTOCOL.md 9); set by the daemon's loop.
    BatchScheduler * scheduler = nullptr;
    bool parked = false;  // the target's weights and context are released (commands/park.h)
    // What a snapshot file must carry to be loaded here (engine/snapshot_files.h).
    std::string state_identity;
    SnapshotWriter snapshot_writer;  // its destructor waits for the files queued
    uint64_t model_bytes = 0;  // the target's weights as loaded; park does not change it
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

    Session(const RoleInfo & role_, const DaemonOptions & opts_, LoadedModel & engine_, TokenStream & stream_,
            CancelState & cancel_, Speculator & spec_)
        : role(role_),
          opts(opts_),
          engine(engine_),
          stream(stream_),
          cancel(cancel_),
          spec(spec_),
          snapshots(opts_.n_slots),
          lanes(static_cast<size_t>(std::max(1, opts_.parallel))),
          live(lanes.front()),
          model_bytes(engine_.model ? llama_model_size(engine_.model.get()) : 0) {}

    // The whole context was cleared or replaced: no lane holds anything.
    void clear_lanes() {
        for (LiveSequence & lane : lanes) {
            lane.clear();
        }
    }
};

}  // namespace lucerna
