// Cancellation shared between the stdin reader thread and the main thread.
//
// Every `generate` gets a sequence number when the reader thread reads it. A `cancel`
// line, the moment it is read, cancels every generate read before it that has not
// finished yet, whether it is running or still queued: the running one stops at its
// next decode step, a queued one stops before its prefill. Both end with their -1 and
// `finish=cancelled`; the cancel itself is answered in command order afterwards.
#pragma once

#include <atomic>
#include <cstdint>

namespace lucerna {

class CancelState {
public:
    // Reader thread: a generate line was read; returns its sequence number (from 1).
    uint64_t note_generate();
    // Reader thread: a cancel line was read. Returns whether some generate read
    // before it was still unfinished (the `running=` of the reply).
    bool note_cancel();

    // Main thread: whether generate `seq` has been cancelled.
    bool cancelled(uint64_t seq) const { return seq != 0 && cancel_upto_.load(std::memory_order_acquire) >= seq; }
    // Main thread: generate `seq` has written its -1.
    void finished(uint64_t seq);

private:
    std::atomic<uint64_t> last_read_{0};
    std::atomic<uint64_t> last_finished_{0};
    std::atomic<uint64_t> cancel_upto_{0};
};

}  // namespace lucerna
