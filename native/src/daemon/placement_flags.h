// The placement flags of PROTOCOL.md section 1: where a target's tensors live
// (--rpc, --override-tensor, --experts-in-host) and where a ds4 shard listens
// (--rpc-listen). Parsing only; engine/placement.h turns them into engine parameters
// and engine/rpc_server.h serves a device.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "daemon/roles.h"

namespace lucerna {

// One --override-tensor entry: tensors whose name matches `pattern` (std::regex,
// searched anywhere in the name, as the engine does) go to the device `device`.
struct TensorOverride {
    std::string pattern;
    std::string device;
};

struct PlacementOptions {
    std::vector<std::string> rpc_servers;   // --rpc, each "HOST:PORT", in order: RPC0, RPC1, ...
    std::vector<TensorOverride> overrides;  // --override-tensor, first match wins
    std::optional<double> experts_in_host;  // --experts-in-host (laguna), in [0, 1]
    std::optional<std::string> rpc_listen;  // --rpc-listen (ds4_shard), "HOST:PORT"

    // The shard's endpoint when --rpc-listen is left out.
    static constexpr const char * kDefaultRpcListen = "127.0.0.1:50052";
};

// Parses one of the flags of this module (--rpc, --override-tensor, --experts-in-host,
// --rpc-listen) into `opts`; daemon/args.cpp's flag table routes them here. A flag may be repeated: --rpc and
// --override-tensor append, the others replace. Throws ProtocolError(bad_flag).
void parse_placement_flag(const std::string & flag, const std::string & value, PlacementOptions & opts);

// Role-specific flags on the wrong role are refused rather than ignored, so a typo in
// a launch script shows at once: --experts-in-host is laguna's, --rpc-listen the
// shard's, and the shard itself takes no --rpc or --override-tensor. Throws bad_flag.
void check_placement_flags(Role role, const PlacementOptions & opts);

// Splits "HOST:PORT" (port 1..65535, host non-empty). Returns false if malformed.
bool split_endpoint(const std::string & endpoint, std::string & host, int & port);

}  // namespace lucerna
