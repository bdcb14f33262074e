#include "wire/fd_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "wire/wire.h"

namespace lucerna {

bool write_all(int fd, const void * data, size_t size) {
    const auto * bytes = static_cast<const unsigned char *>(data);
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::write(fd, bytes + done, size - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        done += static_cast<size_t>(n);
    }
    return true;
}

bool write_file_atomically(const std::string & path, const std::vector<ByteRange> & parts, bool durable) {
    // The one place a command's output path meets the OS (see c_string_value).
    c_string_value(path, ErrorCode::kBadArgs, "output path");
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return false;
    }
    bool ok = true;
    for (const ByteRange & part : parts) {
        ok = ok && write_all(fd, part.data, part.size);
    }
    ok = ok && (!durable || ::fsync(fd) == 0);
    ok = ::close(fd) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

bool write_file_atomically(const std::string & path, const std::string & bytes) {
    return write_file_atomically(path, {{bytes.data(), bytes.size()}});
}

}  // namespace lucerna
