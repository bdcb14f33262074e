// quit | exit (PROTOCOL.md section 5): the reply, then the process exits 0.
#include "commands/handlers.h"

namespace lucerna {

std::string handle_quit(const CommandLine & cmd, const char * name, bool & quit) {
    cmd.expect_positional(0, name);
    cmd.check_options({}, name);
    quit = true;
    return OkReply("quit").line();
}

}  // namespace lucerna
