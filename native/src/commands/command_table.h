// The one description of every command of the protocol (PROTOCOL.md section 5): its
// name, whether it streams, whether it needs the weights, what the stdin reader does
// when it reads one, which roles serve it and its handler. The ready line's
// capabilities, the dispatcher's refusals (unknown_command, unsupported, no_stream_fd,
// parked) and the reader's numbering for cancel all derive from this table, so adding
// a command is one row here plus its handler (tests/native/test_one_source.py checks the
// rows against PROTOCOL.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/command_queue.h"
#include "daemon/roles.h"
#include "daemon/session.h"
#include "wire/wire.h"

namespace lucerna {

// What a handler gets. It returns the `ok ...` reply line or throws ProtocolError.
struct CommandCall {
    Session & session;
    const CommandLine & cmd;
    const QueuedCommand & queued;
    bool quit = false;  // set by quit and exit: the daemon ends after the reply
};

using CommandHandler = std::string (*)(CommandCall & call);

// What the stdin reader thread does the moment it reads the command, before the main
// thread runs it (daemon/cancel.h): a cancel has to reach a generation still running.
enum class OnRead {
    kNothing,
    kNumberGeneration,  // generate, restore: the generation a later cancel can stop
    kCancel,            // cancel: stops every generation read so far
};

// Which roles answer a command; the others answer `err unsupported`.
enum class Served {
    kEveryRole,
    kGeneratingRoles,  // the roles that hold a context (RoleInfo::generates)
    kPflash,           // the drafter only
};

// What the main thread does with the command while protocol 2 generations run
// (PROTOCOL.md 9.3): stdout keeps one reply per command in command order, so a command
// that waits holds back every command read after it (a cancel still acts on reading).
enum class WhileRunning {
    kWaits,      // runs once every running generation has ended
    kAlongside,  // answered between two batched steps
    kSeqForm,    // in its protocol 2 form (it names seq=S): alongside; otherwise waits
};

struct CommandInfo {
    const char * name;
    bool stream;          // writes to the stream fd, then exactly one -1 (S in section 5)
    bool needs_weights;   // `err parked` while the target is parked (section 6)
    OnRead on_read;
    Served served;
    bool in_capabilities;  // listed in the ready line (`exit` is quit's alias, unlisted)
    WhileRunning while_running;
    CommandHandler handler;
};

// Every command, in the order of the ready line's capabilities.
const std::vector<CommandInfo> & command_table();

// Whether `queued` may run while protocol 2 generations are running (see WhileRunning);
// unknown commands and lines too long wait too, so nothing reaches the stream or stdout
// out of order.
bool runs_alongside(const QueuedCommand & queued);

// nullptr for a word that is no command of this protocol.
const CommandInfo * find_command(std::string_view name);

bool serves(const CommandInfo & command, const RoleInfo & role);

// The ready line's `capabilities`: the listed commands `role` serves, in table order.
std::vector<std::string> capabilities(const RoleInfo & role);

// The detail of the `err unsupported` that `role` answers `command` with.
std::string unsupported_detail(const CommandInfo & command, const RoleInfo & role);

}  // namespace lucerna
