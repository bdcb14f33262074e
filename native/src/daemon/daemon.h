// A Lucerna daemon: startup (flags, architecture check, load, ready line), then one
// command at a time from the stdin reader until quit or EOF.
#pragma once

#include "daemon/roles.h"

namespace lucerna {

// The whole process for one role; returns the exit code of PROTOCOL.md section 2.
int run_daemon(Role role, int argc, char ** argv);

}  // namespace lucerna
