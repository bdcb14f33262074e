// Snapshot files (PROTOCOL.md 5.10): `save_slot <slot> <path>` writes a slot to disk and
// `load_slot <slot> <path>` reads one back, so a prefix cache outlives the process.
//
// A file carries the daemon's state identity (the model file, the engine build and every
// setting that changes what the state means or how it was computed), and a checksum over
// everything before it. A file of another identity, a truncated or corrupt one, is
// refused (bad_snapshot_file) and never loaded. Files are written to a temporary name,
// flushed to disk and renamed, so a crash mid-write leaves no file that could be read.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/options.h"
#include "engine/snapshots.h"

namespace lucerna {

// Writes snapshot files on a thread of its own, so that a large state (a gigabyte for a
// 27B model at 12K tokens) reaches the disk while the daemon serves the next command.
// Destroying it waits for every queued write: a daemon that quits leaves whole files.
class SnapshotWriter {
public:
    SnapshotWriter() = default;
    SnapshotWriter(const SnapshotWriter &) = delete;
    SnapshotWriter & operator=(const SnapshotWriter &) = delete;
    ~SnapshotWriter();

    // Queues `snapshot` for `path`, stamped with `identity`; returns the file's size.
    uint64_t enqueue(std::shared_ptr<const Snapshot> snapshot, std::string identity, std::string path);

private:
    struct Job {
        std::shared_ptr<const Snapshot> snapshot;
        std::string identity;
        std::string path;
    };
    void run();

    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> jobs_;
    bool stopping_ = false;
    std::thread thread_;
};

// The identity of the state this daemon computes: what a snapshot taken elsewhere must
// match to be loaded here. Reads the model file's (and draft's) size, mtime and first
// megabyte. Throws model_not_found if a file cannot be read.
std::string state_identity(const DaemonOptions & opts, const std::string & backend, int32_t n_ctx);

// 16 hex digits naming `identity`, for the ready line's `state_id`.
std::string state_id(const std::string & identity);

// The snapshot in the file at `path`. Throws bad_snapshot_file for a file that is
// missing, truncated, corrupt or of another `identity`.
std::unique_ptr<Snapshot> read_snapshot_file(const std::string & path, const std::string & identity);

}  // namespace lucerna
