// Raw writes to the daemon's output fds (the protocol fd and the stream fd).
#pragma once

#include <cstddef>

namespace lucerna {

// Writes all `size` bytes, retrying short writes and EINTR: a reply line or a batch of
// stream values must reach the peer whole or not at all. Returns false once the peer
// is gone (or the fd fails); the caller then shuts down.
bool write_all(int fd, const void * data, size_t size);

}  // namespace lucerna
