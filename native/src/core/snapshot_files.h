// Snapshot files (PROTOCOL.md 5.10): `save_slot <slot> <path>` writes a slot to disk and
// `load_slot <slot> <path>` reads one back, so a prefix cache outlives the process.
//
// A file carries the daemon's state identity (the model file, the engine build and every
// setting that changes what the state means or how it was computed), and a checksum over
// everything before it. A file of another identity, a truncated or corrupt one, is
// refused (bad_snapshot_file) and never loaded. Files are written to a temporary name,
// flushed to disk and renamed, so a crash mid-write leaves no file that could be read.
#pragma once

#include <string>

#include "core/args.h"
#include "core/session.h"
#include "core/wire.h"

namespace lucerna {

// The identity of the state this daemon computes: what a snapshot taken elsewhere must
// match to be loaded here. Reads the model file's (and draft's) size, mtime and first
// megabyte. Throws model_not_found if a file cannot be read.
std::string state_identity(const DaemonOptions & opts, const std::string & backend, int32_t n_ctx);

// 16 hex digits naming `identity`, for the ready line's `state_id`.
std::string state_id(const std::string & identity);

std::string handle_save_slot(Session & session, const CommandLine & cmd);  // save_slot <slot> <path>
std::string handle_load_slot(Session & session, const CommandLine & cmd);  // load_slot <slot> <path>

}  // namespace lucerna
