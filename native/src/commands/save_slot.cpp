// save_slot <slot> <path> | load_slot <slot> <path> (PROTOCOL.md 5.10): a snapshot slot
// to a file and back, through the file format of engine/snapshot_files.h.
#include <memory>
#include <new>

#include "commands/handlers.h"
#include "engine/snapshot_files.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

// What a snapshot file carries and must match: unknown in a daemon started parked until
// its first unpark (PROTOCOL.md 5.6).
const std::string & known_identity(const Session & session) {
    if (session.state_identity.empty()) {
        throw ProtocolError(ErrorCode::kParked, "the daemon started parked and its state is not known yet; "
                                                "send unpark first");
    }
    return session.state_identity;
}

}  // namespace

std::string handle_save_slot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, "save_slot <slot> <path>");
    cmd.check_options({}, "save_slot <slot> <path>");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    const std::string & path = cmd.positional[1];
    const uint64_t bytes = session.snapshot_writer.enqueue(session.snapshots.share(slot), known_identity(session), path);
    return OkReply("save_slot").add("slot", slot).add("bytes", bytes).line();
}

std::string handle_load_slot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, "load_slot <slot> <path>");
    cmd.check_options({}, "load_slot <slot> <path>");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    const std::string & path = cmd.positional[1];
    std::unique_ptr<Snapshot> snapshot;
    try {
        snapshot = read_snapshot_file(path, known_identity(session));
    } catch (const std::bad_alloc &) {
        throw ProtocolError(ErrorCode::kSnapshotFailed, "out of host memory to load " + path);
    }
    if (static_cast<int64_t>(snapshot->tokens.size()) > session.engine.n_ctx_seq) {
        throw ProtocolError(ErrorCode::kBadSnapshotFile, path + " holds more tokens than n_ctx");
    }
    const auto n_tokens = static_cast<int64_t>(snapshot->tokens.size());
    const uint64_t bytes = snapshot->bytes();
    session.snapshots.put(slot, std::move(snapshot));
    return OkReply("load_slot").add("slot", slot).add("n_tokens", n_tokens).add("bytes", bytes).line();
}

}  // namespace lucerna
