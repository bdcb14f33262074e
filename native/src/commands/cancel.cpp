// cancel [seq] (PROTOCOL.md 5.4, 9.3). The stdin reader already acted on it when it read the line
// (daemon/cancel.h); this only answers whether a generation was running then.
#include "commands/generate.h"
#include "commands/handlers.h"

namespace lucerna {

std::string handle_cancel(Session & session, const CommandLine & cmd, bool running) {
    cmd.check_options({}, "cancel [seq]");
    if (cmd.positional.size() > 1) {
        throw ProtocolError(ErrorCode::kBadArgs, "usage: cancel [seq]");
    }
    OkReply reply("cancel");
    if (cmd.positional.size() == 1) {
        // cancel <seq> (protocol 2, PROTOCOL.md 9.3): only that sequence's generation.
        const std::string & word = cmd.positional[0];
        if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos) {
            throw ProtocolError(ErrorCode::kBadArgs, "usage: cancel [seq]; '" + word + "' is not a sequence number");
        }
        reply.add("seq", parse_seq(session, word));
    }
    return reply.add("running", running ? "1" : "0").line();
}

}  // namespace lucerna
