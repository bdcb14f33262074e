// Process lifetime (PROTOCOL.md section 1): a daemon never outlives its parent, and
// SIGTERM / SIGINT stop it cleanly.
#pragma once

namespace lucerna {

// Makes the parent's death look like SIGTERM: a background thread watches getppid() and,
// once we are reparented, wakes the same self-pipe the signal handlers use. Returns false
// when the parent is already gone, so the caller can exit at once.
//
// Not PR_SET_PDEATHSIG: that fires when the *thread* that forked us exits, and Trio
// forks from a worker thread that exits after a few idle seconds, which would kill every
// daemon about 10 s after it started. Before ShutdownSignals exists (model load) the
// watcher simply ends the process.
bool follow_parent_death();

// SIGTERM and SIGINT handlers that only write one byte to a pipe (the self-pipe trick:
// nothing else is async-signal-safe enough). The stdin reader polls the returned fd
// and turns the byte into "cancel everything, then quit". Restores the previous
// handlers on destruction.
class ShutdownSignals {
public:
    ShutdownSignals();
    ~ShutdownSignals();
    ShutdownSignals(const ShutdownSignals &) = delete;
    ShutdownSignals & operator=(const ShutdownSignals &) = delete;

    int fd() const { return read_fd_; }

private:
    int read_fd_ = -1;
    int write_fd_ = -1;
};

}  // namespace lucerna
