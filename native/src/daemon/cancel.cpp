#include "daemon/cancel.h"

namespace lucerna {

uint64_t CancelState::note_generate(int32_t lane) {
    unfinished_.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t seq = last_read_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (valid(lane)) {
        Lane & l = lanes_[static_cast<std::size_t>(lane)];
        l.unfinished.fetch_add(1, std::memory_order_acq_rel);
        l.last_read.store(seq, std::memory_order_release);
    }
    return seq;
}

bool CancelState::note_cancel() {
    const uint64_t upto = last_read_.load(std::memory_order_acquire);
    cancel_upto_.store(upto, std::memory_order_release);
    return unfinished_.load(std::memory_order_acquire) > 0;
}

bool CancelState::note_cancel_lane(int32_t lane) {
    if (!valid(lane)) {
        return false;
    }
    Lane & l = lanes_[static_cast<std::size_t>(lane)];
    const uint64_t upto = l.last_read.load(std::memory_order_acquire);
    l.cancel_upto.store(upto, std::memory_order_release);
    return l.unfinished.load(std::memory_order_acquire) > 0;
}

void CancelState::finished(uint64_t seq, int32_t lane) {
    if (seq == 0) {
        return;
    }
    unfinished_.fetch_sub(1, std::memory_order_acq_rel);
    if (valid(lane)) {
        lanes_[static_cast<std::size_t>(lane)].unfinished.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace lucerna
