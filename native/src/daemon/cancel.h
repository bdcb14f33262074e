// Cancellation shared between the stdin reader thread and the main thread.
//
// Every `generate` (and `restore`) gets a number when the reader thread reads it. A
// `cancel` line, the moment it is read, cancels every generation read before it that
// has not finished yet, whether it is running or still queued: the running one stops at
// its next decode step, a queued one before its prefill. Both end with their -1 and
// `finish=cancelled`; the cancel itself is answered in command order afterwards.
//
// Protocol 2 (PROTOCOL.md 9) adds lanes: a generation that names `seq=S` is also
// numbered on lane S, and `cancel S` cancels only the generations of lane S read before
// it. A plain `cancel` still cancels every generation, of every lane.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "wire/constants.h"

namespace lucerna {

class CancelState {
public:
    // Reader thread: a generation was read (on `lane`, or -1 for a protocol 1 one);
    // returns its number (from 1).
    uint64_t note_generate(int32_t lane = -1);
    // Reader thread: a cancel line was read. Returns whether some generate read
    // before it was still unfinished (the `running=` of the reply).
    bool note_cancel();
    // Reader thread: `cancel <lane>` was read. Returns whether the lane's last
    // generation read before it was still unfinished.
    bool note_cancel_lane(int32_t lane);

    // Main thread: whether generation `seq` (on `lane`, or -1) has been cancelled.
    bool cancelled(uint64_t seq, int32_t lane = -1) const {
        if (seq == 0) {
            return false;
        }
        if (cancel_upto_.load(std::memory_order_acquire) >= seq) {
            return true;
        }
        return valid(lane) && lanes_[static_cast<std::size_t>(lane)].cancel_upto.load(std::memory_order_acquire) >= seq;
    }
    // Main thread: generation `seq` has written its -1 (or its end record), or was
    // refused; once per generation read.
    void finished(uint64_t seq, int32_t lane = -1);

private:
    static bool valid(int32_t lane) { return lane >= 0 && lane < kMaxParallel; }

    // `unfinished` counts generations read and not yet finished (running, queued, or
    // about to be refused): the `running=` of a cancel. Protocol 2 generations finish in
    // any order, so a count, not the number of the last one finished.
    struct Lane {
        std::atomic<uint64_t> last_read{0};
        std::atomic<int64_t> unfinished{0};
        std::atomic<uint64_t> cancel_upto{0};
    };

    std::atomic<uint64_t> last_read_{0};
    std::atomic<int64_t> unfinished_{0};
    std::atomic<uint64_t> cancel_upto_{0};
    std::array<Lane, kMaxParallel> lanes_;
};

}  // namespace lucerna
