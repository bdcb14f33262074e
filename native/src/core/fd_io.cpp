#include "core/fd_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "core/wire.h"

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

bool write_file_atomically(const std::string & path, const std::string & bytes) {
    // The one place a command's output path meets the OS (see c_string_value).
    c_string_value(path, ErrorCode::kBadArgs, "output path");
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    FILE * file = std::fopen(tmp.c_str(), "wb");
    if (file == nullptr) {
        return false;
    }
    const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
    const bool closed = std::fclose(file) == 0;
    if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

}  // namespace lucerna
