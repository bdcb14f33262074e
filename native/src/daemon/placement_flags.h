// The placement flags of PROTOCOL.md section 1: where a target's tensors live
// (--rpc, --override-tensor, --experts-in-host) and where a ds4 shard listens
// (--rpc-listen). Parsing only, into engine/options.h's PlacementOptions;
// engine/placement.h turns them into engine parameters and engine/rpc_server.h serves a
// device.
#pragma once

#include <string>

#include "daemon/roles.h"
#include "engine/options.h"

namespace lucerna {

// Parses one of the flags of this module (--rpc, --override-tensor, --experts-in-host,
// --rpc-listen) into `opts`; daemon/args.cpp's flag table routes them here. A flag may be repeated: --rpc and
// --override-tensor append, the others replace. Throws ProtocolError(bad_flag).
void parse_placement_flag(const std::string & flag, const std::string & value, PlacementOptions & opts);

// Role-specific flags on the wrong role are refused rather than ignored, so a typo in
// a launch script shows at once: --experts-in-host is laguna's, --rpc-listen the
// shard's, and the shard itself takes no --rpc or --override-tensor. Throws bad_flag.
void check_placement_flags(Role role, const PlacementOptions & opts);

}  // namespace lucerna
