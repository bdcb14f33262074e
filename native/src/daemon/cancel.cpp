#include "daemon/cancel.h"

namespace lucerna {

uint64_t CancelState::note_generate() { return last_read_.fetch_add(1, std::memory_order_acq_rel) + 1; }

bool CancelState::note_cancel() {
    const uint64_t upto = last_read_.load(std::memory_order_acquire);
    cancel_upto_.store(upto, std::memory_order_release);
    return last_finished_.load(std::memory_order_acquire) < upto;
}

void CancelState::finished(uint64_t seq) {
    if (seq != 0) {
        last_finished_.store(seq, std::memory_order_release);
    }
}

}  // namespace lucerna
