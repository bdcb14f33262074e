#include "engine/snapshot_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <vector>

#include "engine/log.h"
#include "wire/errors.h"
#include "wire/fd_io.h"

#ifndef LUCERNA_ENGINE_NAME
#define LUCERNA_ENGINE_NAME "unknown"
#endif

namespace lucerna {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'C', 'S', 'N', 'A', 'P', '2'};
constexpr size_t kHeaderProbeBytes = 1 << 20;

// A 64-bit hash of a byte range, four independent lanes of eight bytes a step: it
// guards against truncation and bit rot, not against an adversary, and must not be what
// makes a warm start slow (a 27B model's state at 12K tokens is about a gigabyte).
uint64_t hash_bytes(const void * data, size_t n, uint64_t seed) {
    constexpr uint64_t kPrime = 0x9E3779B185EBCA87ull;
    auto mix = [](uint64_t x) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        return x;
    };
    const auto * p = static_cast<const uint8_t *>(data);
    uint64_t lane[4] = {seed ^ 0x243F6A8885A308D3ull, seed ^ 0x13198A2E03707344ull,
                        seed ^ 0xA4093822299F31D0ull, seed ^ 0x082EFA98EC4E6C89ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k) {
            uint64_t word;
            std::memcpy(&word, p + i + 8 * k, 8);
            lane[k] = (lane[k] ^ word) * kPrime;
        }
    }
    uint64_t tail[4] = {0, 0, 0, 0};
    std::memcpy(tail, p + i, n - i);
    uint64_t h = mix(n);
    for (int k = 0; k < 4; ++k) {
        h = mix(h ^ mix(lane[k] ^ tail[k]));
    }
    return h;
}

// The file, section by section: the header (magic, identity) and then each array with
// its element count in front. The checksum at the end folds every section's hash, so
// both sides stream the big arrays straight between the snapshot and the file.
struct Section {
    const void * data;
    size_t size;
};

std::vector<Section> sections(const Snapshot & s, const std::string & identity, const uint64_t (&counts)[5]) {
    return {{kMagic, sizeof kMagic},
            {&counts[0], 8},
            {identity.data(), identity.size()},
            {&counts[1], 8},
            {s.tokens.data(), s.tokens.size() * sizeof(int32_t)},
            {&counts[2], 8},
            {s.logits.data(), s.logits.size() * sizeof(float)},
            {&counts[3], 8},
            {s.state.data(), s.state.size()},
            {&counts[4], 8},
            {s.draft_state.data(), s.draft_state.size()}};
}

uint64_t fold(const std::vector<Section> & parts) {
    uint64_t h = 0;
    for (const Section & part : parts) {
        h = hash_bytes(part.data, part.size, h);
    }
    return h;
}

uint64_t encoded_size(const Snapshot & snapshot, const std::string & identity) {
    return sizeof kMagic + 8 + identity.size() + 8 + snapshot.tokens.size() * sizeof(int32_t) + 8 +
           snapshot.logits.size() * sizeof(float) + 8 + snapshot.state.size() + 8 + snapshot.draft_state.size() + 8;
}

void write_snapshot_file(const std::string & path, const Snapshot & snapshot, const std::string & identity) {
    const uint64_t counts[5] = {identity.size(), snapshot.tokens.size(), snapshot.logits.size(),
                                snapshot.state.size(), snapshot.draft_state.size()};
    const std::vector<Section> parts = sections(snapshot, identity, counts);
    const uint64_t checksum = fold(parts);
    std::vector<ByteRange> ranges;
    for (const Section & part : parts) {
        ranges.push_back({part.data, part.size});
    }
    ranges.push_back({&checksum, sizeof checksum});
    if (!write_file_atomically(path, ranges, /*durable =*/true)) {
        throw ProtocolError(ErrorCode::kIoFailed, "cannot write " + path + ": " + std::strerror(errno));
    }
}

// Reads a snapshot file section by section into its final vectors (no second copy of
// the state), refusing another identity before reading the bulk.
class SnapshotFileReader {
public:
    explicit SnapshotFileReader(const std::string & path) : path_(path), in_(path, std::ios::binary) {
        if (!in_) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, "cannot open " + path);
        }
        in_.seekg(0, std::ios::end);
        left_ = static_cast<uint64_t>(in_.tellg());
        in_.seekg(0);
    }

    std::unique_ptr<Snapshot> read(const std::string & identity) {
        char magic[sizeof kMagic];
        raw(magic, sizeof magic);
        if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, path_ + " is not a Lucerna snapshot file");
        }
        uint64_t counts[5] = {};
        raw(&counts[0], 8);
        std::string file_id(bounded(counts[0], 1), '\0');
        raw(file_id.data(), file_id.size());
        if (file_id != identity) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile,
                                path_ + " was taken by another model, engine or setting (" + file_id + ")");
        }
        auto snapshot = std::make_unique<Snapshot>();
        array(snapshot->tokens, counts[1]);
        array(snapshot->logits, counts[2]);
        array(snapshot->state, counts[3]);
        array(snapshot->draft_state, counts[4]);
        uint64_t stored = 0;
        raw(&stored, sizeof stored);
        if (left_ != 0 || stored != fold(sections(*snapshot, file_id, counts))) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, path_ + " fails its checksum (truncated or corrupt)");
        }
        if (snapshot->tokens.empty()) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, path_ + " holds no tokens");
        }
        return snapshot;
    }

private:
    void raw(void * into, uint64_t n) {
        if (n > left_ || !in_.read(static_cast<char *>(into), static_cast<std::streamsize>(n))) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, path_ + " is truncated");
        }
        left_ -= n;
    }
    // A count read from the file, checked against what the file still holds before
    // anything is allocated for it.
    uint64_t bounded(uint64_t count, size_t element) {
        if (count > left_ / element) {
            throw ProtocolError(ErrorCode::kBadSnapshotFile, path_ + " is truncated");
        }
        return count;
    }
    template <typename Vector>
    void array(Vector & into, uint64_t & count) {
        using T = typename Vector::value_type;
        raw(&count, 8);
        into.resize(bounded(count, sizeof(T)));
        raw(into.data(), count * sizeof(T));
    }

    std::string path_;
    std::ifstream in_;
    uint64_t left_ = 0;
};

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
                  static_cast<unsigned long long>(hash_bytes(head.data(), head.size(), 0)));
    return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(mtime_ns) + ":" + head_hash;
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
    if (opts.deterministic) {
        // Other kernels, other numbers: a snapshot never crosses the mode.
        id += ";deterministic=1";
    }
    return id;
}

std::string state_id(const std::string & identity) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(
                      hash_bytes(identity.data(), identity.size(), 0)));
    return hex;
}

std::unique_ptr<Snapshot> read_snapshot_file(const std::string & path, const std::string & identity) {
    return SnapshotFileReader(path).read(identity);
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
            write_snapshot_file(job.path, *job.snapshot, job.identity);
        } catch (const ProtocolError & error) {
            log_line("save_slot: %s", error.what());
        }
    }
}

}  // namespace lucerna
