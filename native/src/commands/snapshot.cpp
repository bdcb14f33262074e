// snapshot <slot> | restore <slot> <ids> <n_gen> [options] | free_snapshot <slot> | list_slots
// (PROTOCOL.md 5.5): the commands over the snapshot slots of engine/snapshots.h.
#include <algorithm>

#include "commands/generate.h"
#include "commands/handlers.h"
#include "engine/snapshots.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

const char * const kRestoreUsage = "restore <slot> <ids:...|path> <n_gen> [generate options]";

}  // namespace

std::string handle_snapshot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(1, "snapshot <slot>");
    cmd.check_options({}, "snapshot <slot>");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    auto snapshot =
        capture_snapshot(session.engine.context.get(), session.live, session.engine.n_vocab, session.spec.draft());
    const auto n_tokens = static_cast<int64_t>(snapshot->tokens.size());
    const uint64_t bytes = snapshot->bytes();
    session.snapshots.put(slot, std::move(snapshot));
    return OkReply("snapshot").add("slot", slot).add("n_tokens", n_tokens).add("bytes", bytes).line();
}

std::string handle_restore(Session & session, const CommandLine & cmd, uint64_t generate_seq) {
    if (cmd.positional.size() != 3) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string("usage: ") + kRestoreUsage);
    }
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    const Snapshot & from = session.snapshots.at(slot);
    const GenerateRequest req =
        parse_generate_request(session, cmd, cmd.positional[1], cmd.positional[2], kRestoreUsage);
    const bool prefix = from.tokens.size() <= req.prompt.size() &&
                        std::equal(from.tokens.begin(), from.tokens.end(), req.prompt.begin());
    if (!prefix) {
        throw ProtocolError(ErrorCode::kSnapshotMismatch, "slot " + std::to_string(slot) + " holds " +
                                                              std::to_string(from.tokens.size()) +
                                                              " tokens that are not a prefix of the given ids");
    }
    return run_generation(session, req, generate_seq, "restore", &from);
}

std::string handle_free_snapshot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(1, "free_snapshot <slot>");
    cmd.check_options({}, "free_snapshot <slot>");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    const uint64_t bytes = session.snapshots.release(slot);
    return OkReply("free_snapshot").add("slot", slot).add("bytes", bytes).line();
}

std::string handle_list_slots(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(0, "list_slots");
    cmd.check_options({}, "list_slots");
    return OkReply("list_slots")
        .add("slots", session.snapshots.listing())
        .add("bytes", session.snapshots.bytes())
        .line();
}

}  // namespace lucerna
