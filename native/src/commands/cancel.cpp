// cancel (PROTOCOL.md 5.4). The stdin reader already acted on it when it read the line
// (daemon/cancel.h); this only answers whether a generation was running then.
#include "commands/handlers.h"

namespace lucerna {

std::string handle_cancel(const CommandLine & cmd, bool running) {
    cmd.expect_positional(0, "cancel");
    cmd.check_options({}, "cancel");
    return OkReply("cancel").add("running", running ? "1" : "0").line();
}

}  // namespace lucerna
