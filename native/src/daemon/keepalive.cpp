#include "daemon/keepalive.h"

#include <chrono>

namespace lucerna {

KeepAlive::KeepAlive(LineWriter & out, int interval_ms) {
    if (interval_ms > 0) {
        thread_ = std::thread([this, &out, interval_ms] { run(out, interval_ms); });
    }
}

KeepAlive::~KeepAlive() {
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void KeepAlive::run(LineWriter & out, int interval_ms) {
    std::unique_lock<std::mutex> lock(mutex_);
    // The first one at once: the client hears the host before the model is loaded.
    while (!stopping_) {
        if (!out.write_keepalive()) {
            return;  // the reader is gone; the command loop finds out on its next write
        }
        wake_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stopping_; });
    }
}

}  // namespace lucerna
