#include "core/process_stats.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace lucerna {

int64_t resident_set_kb() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::strtoll(line.c_str() + 6, nullptr, 10);  // "VmRSS:   412332 kB"
        }
    }
    return -1;
}

}  // namespace lucerna

#include "core/commands.h"

namespace lucerna {

std::string handle_stats(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(0, "stats");
    cmd.check_options({}, "stats");
    return OkReply("stats")
        .add("n_ctx", session.engine.n_ctx)
        .add("n_vocab", session.engine.n_vocab)
        .add("requests", session.stats.requests)
        .add("tokens_prompt", session.stats.tokens_prompt)
        .add("tokens_generated", session.stats.tokens_generated)
        .add("rss_kb", resident_set_kb())
        .line();
}

}  // namespace lucerna
