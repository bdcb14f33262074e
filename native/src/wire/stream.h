// The binary stream: int32 little-endian values, each stream command terminated by
// exactly one -1 (PROTOCOL.md section 1), on the stream fd or, on one channel, framed on
// stdout (section 10).
#pragma once

#include <cstdint>
#include <vector>

#include "wire/wire.h"

namespace lucerna {

class TokenStream {
public:
    // fd < 0: the daemon was started without --stream-fd.
    explicit TokenStream(int fd) : fd_(fd) {}
    // One channel: the values go to `out` as stream frames.
    explicit TokenStream(LineWriter & out) : out_(&out) {}

    bool available() const { return fd_ >= 0 || out_ != nullptr; }

    // Starts a stream command: arms the single terminator.
    void begin() { terminated_ = false; }

    // Writes values now (generate writes each token as soon as it is sampled).
    // Returns false if the reader is gone.
    bool write(const std::vector<int32_t> & values);
    bool write(int32_t value) { return write(std::vector<int32_t>{value}); }

    // Writes the -1 terminator unless this command already did; idempotent, so the
    // dispatcher can always call it after a handler, on success or on error.
    bool terminate();

private:
    int fd_ = -1;
    LineWriter * out_ = nullptr;
    bool terminated_ = true;
};

}  // namespace lucerna
