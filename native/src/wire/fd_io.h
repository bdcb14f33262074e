// Raw writes to the daemon's output fds (the protocol fd and the stream fd), and the
// files commands write (`vocab`, `stats path=`).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lucerna {

// Writes all `size` bytes, retrying short writes and EINTR: a reply line or a batch of
// stream values must reach the peer whole or not at all. Returns false once the peer
// is gone (or the fd fails); the caller then shuts down.
bool write_all(int fd, const void * data, size_t size);

// One piece of a file to write, not owned.
struct ByteRange {
    const void * data;
    size_t size;
};

// Writes `parts` one after the other next to `path` (as `<path>.tmp-<pid>`) and
// renames, so a reader never sees half a file; with `durable`, flushes it to disk
// first, so that a crash after the rename cannot leave a file with holes. Returns false
// (leaving nothing behind) when any step fails. A path holding a NUL byte names no file
// (the OS would write a shorter one): it throws ProtocolError(bad_args) before anything
// is written.
bool write_file_atomically(const std::string & path, const std::vector<ByteRange> & parts, bool durable = false);
bool write_file_atomically(const std::string & path, const std::string & bytes);

}  // namespace lucerna
