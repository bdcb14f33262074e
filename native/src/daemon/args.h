// The daemon command line (PROTOCOL.md section 1):
//   lucerna-<role> <model.gguf> [--stream-fd=N] [--n-ctx=N] [--threads=N]
//                  [--n-gpu-layers=N] [--seed=N] [--draft=<draft.gguf>] ...
#pragma once

#include "engine/options.h"

namespace lucerna {

// Accepts --name=value and --name value. Throws ProtocolError(bad_flag) for an
// unknown flag, a malformed value, a missing or extra model path, or a --stream-fd
// that is not an open descriptor.
DaemonOptions parse_daemon_args(int argc, char ** argv);

}  // namespace lucerna
