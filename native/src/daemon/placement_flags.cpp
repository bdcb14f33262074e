#include "daemon/placement_flags.h"

#include <cstdint>
#include <optional>
#include <regex>

#include "wire/errors.h"
#include "wire/numbers.h"

namespace lucerna {
namespace {

std::vector<std::string> split_commas(const std::string & text) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        parts.push_back(text.substr(start, comma - start));
        if (comma == std::string::npos) {
            return parts;
        }
        start = comma + 1;
    }
}

ProtocolError bad_flag(const std::string & flag, const std::string & value, const std::string & why) {
    return ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + ": " + why);
}

void parse_rpc(const std::string & value, PlacementOptions & opts) {
    for (const auto & server : split_commas(value)) {
        std::string host;
        int port = 0;
        if (!split_endpoint(server, host, port)) {
            throw bad_flag("--rpc", value, "'" + server + "' is not HOST:PORT");
        }
        opts.rpc_servers.push_back(server);
    }
}

// Like llama.cpp's -ot: entries separated by commas, each REGEX=DEVICE. We split at
// the last '=' so a pattern may itself contain one; device names never do. Whether
// DEVICE exists is only known once the RPC servers are registered (engine/placement.cpp).
void parse_override(const std::string & value, PlacementOptions & opts) {
    for (const auto & entry : split_commas(value)) {
        const size_t eq = entry.rfind('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) {
            throw bad_flag("--override-tensor", value, "'" + entry + "' is not REGEX=DEVICE");
        }
        TensorOverride ov{entry.substr(0, eq), entry.substr(eq + 1)};
        try {
            const std::regex compiled(ov.pattern);  // the engine compiles it again while loading
        } catch (const std::regex_error & error) {
            throw bad_flag("--override-tensor", value,
                           "'" + ov.pattern + "' is not a regular expression (" + error.what() + ")");
        }
        opts.overrides.push_back(std::move(ov));
    }
}

double parse_share(const std::string & flag, const std::string & value) {
    const std::optional<double> share = parse_decimal(value);
    if (!share || *share < 0.0 || *share > 1.0) {
        throw bad_flag(flag, value, "must be a number in [0, 1]");
    }
    return *share;
}

}  // namespace

void parse_placement_flag(const std::string & flag, const std::string & value, PlacementOptions & opts) {
    if (flag == "--rpc") {
        parse_rpc(value, opts);
    } else if (flag == "--override-tensor") {
        parse_override(value, opts);
    } else if (flag == "--experts-in-host") {
        opts.experts_in_host = parse_share(flag, value);
    } else if (flag == "--rpc-listen") {
        std::string host;
        int port = 0;
        if (!split_endpoint(value, host, port)) {
            throw bad_flag(flag, value, "expected HOST:PORT, e.g. " + std::string(PlacementOptions::kDefaultRpcListen));
        }
        opts.rpc_listen = value;
    } else {
        throw ProtocolError(ErrorCode::kBadFlag, flag + " is not a placement flag");
    }
}

void check_placement_flags(Role role, const PlacementOptions & opts) {
    const RoleInfo & info = role_info(role);
    if (opts.experts_in_host && role != Role::kLaguna) {
        throw ProtocolError(ErrorCode::kBadFlag,
                            std::string("--experts-in-host is a flag of lucerna-laguna, not ") + info.binary);
    }
    if (opts.rpc_listen && role != Role::kDs4Shard) {
        throw ProtocolError(ErrorCode::kBadFlag,
                            std::string("--rpc-listen is a flag of lucerna-ds4-shard, not ") + info.binary);
    }
    if (role == Role::kDs4Shard && (!opts.rpc_servers.empty() || !opts.overrides.empty())) {
        throw ProtocolError(ErrorCode::kBadFlag,
                            "lucerna-ds4-shard serves a device; --rpc and --override-tensor are target flags");
    }
}

}  // namespace lucerna
