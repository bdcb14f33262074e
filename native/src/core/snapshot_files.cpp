#include "core/snapshot_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <vector>

#include "core/errors.h"
#include "core/log.h"
#include "core/session.h"

#ifndef LUCERNA_ENGINE_NAME
#define LUCERNA_ENGINE_NAME "unknown"
#endif

namespace lucerna {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'C', 'S', 'N', 'A', 'P', '1'};
constexpr size_t kHeaderProbeBytes = 1 << 20;

// A 64-bit checksum, eight bytes a step: this guards against truncation and bit rot, not
// against an adversary, and must not be what makes a warm start slow.
uint64_t checksum(const uint8_t * data, size_t n, uint64_t h = 0x9E3779B97F4A7C15ull) {
    auto mix = [](uint64_t x) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        return x;
    };
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        std::memcpy(&word, data + i, 8);
        h = (h ^ mix(word)) * 0x100000001B3ull + 0x2545F4914F6CDD1Dull;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, data + i, n - i);
    h = (h ^ mix(tail ^ (static_cast<uint64_t>(n - i) << 56))) * 0x100000001B3ull;
    return mix(h ^ n);
}

std::string file_identity(const std::string & path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        throw ProtocolError(ErrorCode::kModelNotFound, "cannot stat " + path);
    }
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> head(kHeaderProbeBytes);
    in.read(reinterpret_cast<char *>(head.data()), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    const auto mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    char head_hash[17];
    std::snprintf(head_hash, sizeof head_hash, "%016llx",
                  static_cast<unsigned long long>(checksum(head.data(), head.size())));
    return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(mtime_ns) + ":" + head_hash;
}

// Appends to a byte buffer in the file's little-endian layout.
struct Writer {
    std::vector<uint8_t> bytes;
    void raw(const void * p, size_t n) {
        const auto * b = static_cast<const uint8_t *>(p);
        bytes.insert(bytes.end(), b, b + n);
    }
    void u64(uint64_t v) { raw(&v, 8); }
    template <typename T>
    void vec(const std::vector<T> & v) {
        u64(v.size());
        raw(v.data(), v.size() * sizeof(T));
    }
};

struct Reader {
    const std::vector<uint8_t> & bytes;
    size_t at = 0;
    void raw(void * p, size_t n) {
        if (n > bytes.size() - at) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, "the file is truncated");
        }
        std::memcpy(p, bytes.data() + at, n);
        at += n;
    }
    uint64_t u64() {
        uint64_t v = 0;
        raw(&v, 8);
        return v;
    }
    template <typename T>
    std::vector<T> vec() {
        const uint64_t n = u64();
        if (n > (bytes.size() - at) / sizeof(T)) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, "the file is truncated");
        }
        std::vector<T> v(n);
        raw(v.data(), n * sizeof(T));
        return v;
    }
};

uint64_t encoded_size(const Snapshot & snapshot, const std::string & identity) {
    return sizeof kMagic + 8 + identity.size() + 8 + snapshot.tokens.size() * sizeof(int32_t) + 8 +
           snapshot.logits.size() * sizeof(float) + 8 + snapshot.state.size() + 8 + snapshot.draft_state.size() + 8;
}

std::vector<uint8_t> encode(const Snapshot & snapshot, const std::string & identity) {
    Writer w;
    w.bytes.reserve(encoded_size(snapshot, identity));
    w.raw(kMagic, sizeof kMagic);
    w.u64(identity.size());
    w.raw(identity.data(), identity.size());
    w.vec(snapshot.tokens);
    w.vec(snapshot.logits);
    w.vec(snapshot.state);
    w.vec(snapshot.draft_state);
    w.u64(checksum(w.bytes.data(), w.bytes.size()));
    return std::move(w.bytes);
}

std::unique_ptr<Snapshot> decode(const std::vector<uint8_t> & bytes, const std::string & identity,
                                 const std::string & path) {
    if (bytes.size() < sizeof kMagic + 16 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, path + " is not a Lucerna snapshot file");
    }
    uint64_t stored = 0;
    std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
    if (stored != checksum(bytes.data(), bytes.size() - 8)) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, path + " fails its checksum (truncated or corrupt)");
    }
    Reader r{bytes};
    r.at = sizeof kMagic;
    const uint64_t id_len = r.u64();
    if (id_len > bytes.size()) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, path + " is truncated");
    }
    std::string file_id(id_len, '\0');
    r.raw(file_id.data(), id_len);
    if (file_id != identity) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile,
                            path + " was taken by another model, engine or setting (" + file_id + ")");
    }
    auto snapshot = std::make_unique<Snapshot>();
    snapshot->tokens = r.vec<int32_t>();
    snapshot->logits = r.vec<float>();
    snapshot->state = r.vec<uint8_t>();
    snapshot->draft_state = r.vec<uint8_t>();
    if (r.at != bytes.size() - 8 || snapshot->tokens.empty()) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, path + " has an unexpected layout");
    }
    return snapshot;
}

void write_atomically(const std::string & path, const std::vector<uint8_t> & bytes) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw ProtocolError(ErrorCode::kIoFailed, "cannot create " + tmp + ": " + std::strerror(errno));
    }
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            const std::string why = std::strerror(errno);
            ::close(fd);
            ::unlink(tmp.c_str());
            throw ProtocolError(ErrorCode::kIoFailed, "cannot write " + tmp + ": " + why);
        }
        done += static_cast<size_t>(n);
    }
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        ::unlink(tmp.c_str());
        throw ProtocolError(ErrorCode::kIoFailed, "cannot write " + path + ": " + why);
    }
}

std::vector<uint8_t> read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, "cannot open " + path);
    }
    const auto size = static_cast<size_t>(in.tellg());
    std::vector<uint8_t> bytes(size);
    in.seekg(0);
    in.read(reinterpret_cast<char *>(bytes.data()), static_cast<std::streamsize>(size));
    if (static_cast<size_t>(in.gcount()) != size) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, "cannot read " + path);
    }
    return bytes;
}

}  // namespace

std::string state_identity(const DaemonOptions & opts, const std::string & backend, int32_t n_ctx) {
    std::string id = "model=" + file_identity(opts.model_path);
    if (!opts.draft_path.empty()) {
        id += ";draft=" + file_identity(opts.draft_path) + ";block=" + std::to_string(opts.draft_block_size);
    }
    id += ";engine=" LUCERNA_ENGINE_NAME ";backend=" + backend + ";n_ctx=" + std::to_string(n_ctx) +
          ";kv=" + opts.kv_type + ";flash_attn=" + std::to_string(opts.flash_attn) +
          ";chunk=" + std::to_string(opts.chunk);
    return id;
}

std::string state_id(const std::string & identity) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(
                      checksum(reinterpret_cast<const uint8_t *>(identity.data()), identity.size())));
    return hex;
}

SnapshotWriter::~SnapshotWriter() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

uint64_t SnapshotWriter::enqueue(std::shared_ptr<const Snapshot> snapshot, std::string identity, std::string path) {
    const uint64_t size = encoded_size(*snapshot, identity);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.push_back({std::move(snapshot), std::move(identity), std::move(path)});
        if (!thread_.joinable()) {
            thread_ = std::thread([this] { run(); });
        }
    }
    wake_.notify_all();
    return size;
}

void SnapshotWriter::run() {
    while (true) {
        Job job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) {
                return;  // stopping, and every queued file is written
            }
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        try {
            write_atomically(job.path, encode(*job.snapshot, job.identity));
        } catch (const ProtocolError & error) {
            log_line("save_slot: %s", error.what());
        } catch (const std::bad_alloc &) {
            log_line("save_slot: out of host memory to encode %s", job.path.c_str());
        }
    }
}

std::string handle_save_slot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, "save_slot <slot> <path>");
    cmd.check_options({}, "save_slot <slot> <path>");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    const std::string & path = cmd.positional[1];
    const uint64_t bytes = session.snapshot_writer.enqueue(session.snapshots.share(slot), session.state_identity, path);
    return OkReply("save_slot").add("slot", slot).add("bytes", bytes).line();
}

std::string handle_load_slot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, "load_slot <slot> <path>");
    cmd.check_options({}, "load_slot <slot> <path>");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    const std::string & path = cmd.positional[1];
    std::unique_ptr<Snapshot> snapshot;
    try {
        snapshot = decode(read_file(path), session.state_identity, path);
    } catch (const std::bad_alloc &) {
        throw ProtocolError(ErrorCode::kSnapshotFailed, "out of host memory to load " + path);
    }
    if (static_cast<int64_t>(snapshot->tokens.size()) > session.engine.n_ctx) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, path + " holds more tokens than n_ctx");
    }
    const auto n_tokens = static_cast<int64_t>(snapshot->tokens.size());
    const uint64_t bytes = snapshot->bytes();
    session.snapshots.put(slot, std::move(snapshot));
    return OkReply("load_slot").add("slot", slot).add("n_tokens", n_tokens).add("bytes", bytes).line();
}

}  // namespace lucerna
