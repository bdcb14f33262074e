#include "wire/stream.h"

#include "wire/fd_io.h"

namespace lucerna {

bool TokenStream::write(const std::vector<int32_t> & values) {
    if (!available()) {
        return false;
    }
    std::vector<unsigned char> bytes;
    bytes.reserve(values.size() * 4);
    for (const int32_t value : values) {
        const auto u = static_cast<uint32_t>(value);
        bytes.push_back(static_cast<unsigned char>(u & 0xff));
        bytes.push_back(static_cast<unsigned char>((u >> 8) & 0xff));
        bytes.push_back(static_cast<unsigned char>((u >> 16) & 0xff));
        bytes.push_back(static_cast<unsigned char>((u >> 24) & 0xff));
    }
    return out_ != nullptr ? out_->write_stream_frame(bytes.data(), bytes.size())
                           : write_all(fd_, bytes.data(), bytes.size());
}

bool TokenStream::terminate() {
    if (terminated_ || !available()) {
        return true;
    }
    terminated_ = true;
    return write(-1);
}

}  // namespace lucerna
