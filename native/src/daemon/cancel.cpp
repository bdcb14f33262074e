#include "daemon/cancel.h"

namespace lucerna {

uint64_t CancelState::note_generate(int32_t lane) {
    const uint64_t seq = last_read_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (valid(lane)) {
        lanes_[static_cast<size_t>(lane)].last_read.store(seq, std::memory_order_release);
    }
    return seq;
}

bool CancelState::note_cancel() {
    const uint64_t upto = last_read_.load(std::memory_order_acquire);
    cancel_upto_.store(upto, std::memory_order_release);
    return last_finished_.load(std::memory_order_acquire) < upto;
}

bool CancelState::note_cancel_lane(int32_t lane) {
    if (!valid(lane)) {
        return false;
    }
    Lane & l = lanes_[static_cast<size_t>(lane)];
    const uint64_t upto = l.last_read.load(std::memory_order_acquire);
    l.cancel_upto.store(upto, std::memory_order_release);
    return l.last_finished.load(std::memory_order_acquire) < upto;
}

void CancelState::finished(uint64_t seq, int32_t lane) {
    if (seq == 0) {
        return;
    }
    // Protocol 1 generations finish in the order they were read; lanes finish in any
    // order, so the global mark only moves forward.
    uint64_t seen = last_finished_.load(std::memory_order_acquire);
    while (seen < seq && !last_finished_.compare_exchange_weak(seen, seq, std::memory_order_acq_rel)) {
    }
    if (valid(lane)) {
        lanes_[static_cast<size_t>(lane)].last_finished.store(seq, std::memory_order_release);
    }
}

}  // namespace lucerna
