// The binary stream fd: int32 little-endian values, each stream command terminated by
// exactly one -1 (PROTOCOL.md section 1).
#pragma once

#include <cstdint>
#include <vector>

namespace lucerna {

class TokenStream {
public:
    // fd < 0: the daemon was started without --stream-fd.
    explicit TokenStream(int fd) : fd_(fd) {}

    bool available() const { return fd_ >= 0; }

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
    int fd_;
    bool terminated_ = true;
};

}  // namespace lucerna
