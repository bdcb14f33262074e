// Keep-alive lines on one channel (--channel=stdout, PROTOCOL.md 10): a thread writes
// `@alive` every --keepalive-ms from startup (model loading included) to exit, so that
// a client across a network can tell a daemon that is busy from a link that is gone.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "wire/wire.h"

namespace lucerna {

class KeepAlive {
public:
    // interval_ms <= 0: no thread, nothing written.
    KeepAlive(LineWriter & out, int interval_ms);
    ~KeepAlive();
    KeepAlive(const KeepAlive &) = delete;
    KeepAlive & operator=(const KeepAlive &) = delete;

private:
    void run(LineWriter & out, int interval_ms);

    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace lucerna
