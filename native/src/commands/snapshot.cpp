// snapshot <slot> | restore <slot> <ids> <n_gen> [options] | free_snapshot <slot> | list_slots
// (PROTOCOL.md 5.5): the commands over the snapshot slots of engine/snapshots.h.
#include <algorithm>

#include "commands/generate.h"
#include "commands/handlers.h"
#include "daemon/batch_scheduler.h"
#include "engine/snapshots.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

const char * const kRestoreUsage = "restore <slot> <ids:...|path> <n_gen> [generate options]";

}  // namespace

std::string handle_snapshot(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(1, "snapshot <slot> [seq=S]");
    cmd.check_options({"seq"}, "snapshot <slot> [seq=S]");
    const int32_t slot = session.snapshots.parse_slot(cmd.positional[0]);
    int32_t seq = 0;
    for (const auto & [key, value] : cmd.options) {
        seq = parse_seq(session, value);  // the only option
    }
    if (session.scheduler != nullptr && session.scheduler->lane_busy(seq)) {
        throw ProtocolError(ErrorCode::kSeqBusy,
                            "sequence " + std::to_string(seq) + " is still generating; snapshot it after its done line");
    }
    auto snapshot = capture_snapshot(session.engine.context.get(), session.lanes[static_cast<size_t>(seq)],
                                     session.engine.n_vocab, session.spec.attached_draft(), seq);
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
    GenerateRequest req =
        parse_generate_request(session, cmd, cmd.positional[1], cmd.positional[2], kRestoreUsage);
    const bool prefix = from.tokens.size() <= req.prompt.size() &&
                        std::equal(from.tokens.begin(), from.tokens.end(), req.prompt.begin());
    if (!prefix) {
        throw ProtocolError(ErrorCode::kSnapshotMismatch, "slot " + std::to_string(slot) + " holds " +
                                                              std::to_string(from.tokens.size()) +
                                                              " tokens that are not a prefix of the given ids");
    }
    if (req.seq >= 0) {
        return start_on_lane(session, std::move(req), generate_seq, "restore", session.snapshots.share(slot));
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
