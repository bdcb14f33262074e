#include "daemon/args.h"

#include <fcntl.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <thread>

#include "daemon/placement_flags.h"
#include "engine/lookup.h"
#include "wire/constants.h"
#include "wire/errors.h"
#include "wire/numbers.h"

namespace lucerna {
namespace {

// Flag numbers are the grammar of wire/numbers.h, with a leading '+' allowed (strtoll
// took one, and so do they), in [min, max]; the error names the flag.
int64_t flag_int(const std::string & flag, const std::string & value, int64_t min, int64_t max) {
    const std::optional<int64_t> parsed = parse_integer(value, PlusSign::kAllowed);
    if (!parsed || *parsed < min || *parsed > max) {
        throw ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + " is not an integer in [" + std::to_string(min) +
                                                     ", " + std::to_string(max) + "]");
    }
    return *parsed;
}

bool flag_on(const std::string & flag, const std::string & value) {
    if (value != "on" && value != "off") {
        throw ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + " must be on or off");
    }
    return value == "on";
}

double flag_real(const std::string & flag, const std::string & value, double min, double max) {
    const std::optional<double> parsed = parse_decimal(value);
    if (!parsed || !(*parsed >= min && *parsed <= max)) {
        throw ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + " is not a number in [" +
                                                     std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    return *parsed;
}

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

using FlagSetter = void (*)(const std::string & flag, const std::string & value, DaemonOptions & opts);

struct Flag {
    const char * name;
    FlagSetter set;
};

// Every flag of PROTOCOL.md section 1 and what it sets, in the order the unknown-flag
// error lists them; a flag is known exactly when it has a row here.
const Flag kFlags[] = {
    {"--stream-fd",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         // 0, 1 and 2 are the command and protocol channels and the log.
         opts.stream_fd = static_cast<int>(flag_int(flag, value, 3, kI32Max));
         if (::fcntl(opts.stream_fd, F_GETFD) < 0) {
             throw ProtocolError(ErrorCode::kBadFlag, "--stream-fd=" + value + " is not an open file descriptor");
         }
     }},
    {"--channel",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         if (value != "fds" && value != "stdout") {
             throw ProtocolError(ErrorCode::kBadFlag, "--channel=" + value + " must be fds or stdout");
         }
         opts.one_channel = value == "stdout";
     }},
    {"--keepalive-ms",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.keepalive_ms = static_cast<int32_t>(flag_int(flag, value, 0, 3600 * 1000));
     }},
    {"--n-ctx",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.n_ctx = static_cast<int32_t>(flag_int(flag, value, 1, kI32Max));
     }},
    {"--threads",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.n_threads = static_cast<int32_t>(flag_int(flag, value, 1, 1024));
     }},
    {"--n-gpu-layers",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.n_gpu_layers = static_cast<int32_t>(flag_int(flag, value, -1, kI32Max));
     }},
    {"--seed",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.seed = static_cast<uint32_t>(flag_int(flag, value, 0, std::numeric_limits<uint32_t>::max()));
     }},
    {"--chunk",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.chunk = static_cast<int32_t>(flag_int(flag, value, 1, kI32Max));
     }},
    {"--slots",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.n_slots = static_cast<int32_t>(flag_int(flag, value, 0, 1 << 20));
     }},
    {"--parallel",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.parallel = static_cast<int32_t>(flag_int(flag, value, 1, kMaxParallel));
     }},
    {"--checkpoint-mib",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.checkpoint_bytes = static_cast<uint64_t>(flag_int(flag, value, 0, int64_t{1} << 30)) << 20;
     }},
    {"--kv-unified",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.kv_split = !flag_on(flag, value);
     }},
    {"--max-line",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         // A floor that every valid command fits, so a typo cannot lock the client out.
         opts.max_line = flag_int(flag, value, 64, int64_t{1} << 32);
     }},
    {"--draft",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         if (value.empty()) {
             throw ProtocolError(ErrorCode::kBadFlag, "--draft needs a path to a DFlash draft GGUF");
         }
         opts.draft_path = value;
     }},
    {"--draft-block-size",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         // 2: the smallest block that proposes anything.
         opts.draft_block_size = static_cast<int32_t>(flag_int(flag, value, 2, kMaxDraftBlock));
     }},
    {"--draft-oracle",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         if (value.empty()) {
             throw ProtocolError(ErrorCode::kBadFlag, "--draft-oracle needs a path to a token file");
         }
         opts.oracle_path = value;
     }},
    {"--oracle-accept",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.oracle_accept = flag_real(flag, value, 1.0, static_cast<double>(kMaxDraftBlock));
     }},
    {"--oracle-rank",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.oracle_rank = static_cast<int32_t>(flag_int(flag, value, 0, kMaxTreeBranches - 1));
     }},
    {"--draft-tree",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.draft_tree = static_cast<int32_t>(flag_int(flag, value, 0, kMaxTreeBranches * (kMaxDraftBlock - 1)));
     }},
    {"--draft-tree-branches",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.draft_tree_branches = static_cast<int32_t>(flag_int(flag, value, 1, kMaxTreeBranches));
     }},
    {"--lookup",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         if (value != "off" && value != "opt-in" && value != "on") {
             throw ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + " must be off, opt-in or on");
         }
         opts.lookup = value == "off"      ? DaemonOptions::Lookup::kOff
                       : value == "opt-in" ? DaemonOptions::Lookup::kOptIn
                                           : DaemonOptions::Lookup::kOn;
     }},
    {"--lookup-min",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.lookup_min = static_cast<int32_t>(flag_int(flag, value, 1, kMaxLookupMatch));
     }},
    {"--flash-attn",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         if (value != "auto" && value != "on" && value != "off") {
             throw ProtocolError(ErrorCode::kBadFlag, "--flash-attn=" + value + " must be auto, on or off");
         }
         opts.flash_attn = value == "auto" ? -1 : value == "on" ? 1 : 0;
     }},
    {"--deterministic",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.deterministic = flag_on(flag, value);
     }},
    {"--parked",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.parked = flag_on(flag, value);
     }},
    {"--kv-type",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         if (value != "f16" && value != "f32" && value != "bf16" && value != "q8_0") {
             throw ProtocolError(ErrorCode::kBadFlag, "--kv-type=" + value + " must be f16, f32, bf16 or q8_0");
         }
         opts.kv_type = value;
     }},
    // The placement flags parse in daemon/placement_flags.cpp.
    {"--rpc", [](const std::string & flag, const std::string & value,
                 DaemonOptions & opts) { parse_placement_flag(flag, value, opts.placement); }},
    {"--override-tensor", [](const std::string & flag, const std::string & value,
                             DaemonOptions & opts) { parse_placement_flag(flag, value, opts.placement); }},
    {"--experts-in-host", [](const std::string & flag, const std::string & value,
                             DaemonOptions & opts) { parse_placement_flag(flag, value, opts.placement); }},
    {"--rpc-listen", [](const std::string & flag, const std::string & value,
                        DaemonOptions & opts) { parse_placement_flag(flag, value, opts.placement); }},
    {"--rpc-timeout-ms",
     [](const std::string & flag, const std::string & value, DaemonOptions & opts) {
         opts.placement.rpc_timeout_ms = static_cast<int32_t>(flag_int(flag, value, 100, 3600 * 1000));
     }},
};

const FlagSetter * find_flag(const std::string & name) {
    for (const Flag & flag : kFlags) {
        if (name == flag.name) {
            return &flag.set;
        }
    }
    return nullptr;
}

// "--stream-fd, --n-ctx, ... and --rpc-listen"
std::string flag_names() {
    std::string names;
    const size_t n = std::size(kFlags);
    for (size_t k = 0; k < n; ++k) {
        names += (k == 0 ? "" : k + 1 == n ? " and " : ", ") + std::string(kFlags[k].name);
    }
    return names;
}

}  // namespace

DaemonOptions parse_daemon_args(int argc, char ** argv) {
    DaemonOptions opts;
    bool have_model = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--", 0) != 0) {
            if (have_model) {
                throw ProtocolError(ErrorCode::kBadFlag, "unexpected argument '" + arg + "' (one model path only)");
            }
            opts.model_path = arg;
            have_model = true;
            continue;
        }
        std::string flag = arg;
        std::string value;
        const size_t eq = arg.find('=');
        if (eq != std::string::npos) {
            flag = arg.substr(0, eq);
            value = arg.substr(eq + 1);
        }
        const FlagSetter * set = find_flag(flag);
        if (set == nullptr) {
            throw ProtocolError(ErrorCode::kBadFlag, "unknown flag " + flag + "; flags are " + flag_names());
        }
        if (eq == std::string::npos) {
            if (i + 1 >= argc) {
                throw ProtocolError(ErrorCode::kBadFlag, flag + " needs a value");
            }
            value = argv[++i];
        }
        (*set)(flag, value, opts);
    }
    if (!have_model) {
        throw ProtocolError(ErrorCode::kBadFlag, "missing model path; usage: " + std::string(argv[0]) +
                                                     " <model.gguf> [--stream-fd=N] [--n-ctx=N] [--threads=N] "
                                                     "[--n-gpu-layers=N] [--seed=N]");
    }
    if (opts.oracle_accept != 0.0 && opts.oracle_path.empty()) {
        throw ProtocolError(ErrorCode::kBadFlag, "--oracle-accept only applies with --draft-oracle");
    }
    if (opts.oracle_rank != 0 && opts.oracle_path.empty()) {
        throw ProtocolError(ErrorCode::kBadFlag, "--oracle-rank only applies with --draft-oracle");
    }
    if (opts.draft_tree != 0 && opts.draft_path.empty() && opts.oracle_path.empty()) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft-tree needs --draft or --draft-oracle (a proposer that ranks "
                                                 "candidates per position)");
    }
    if (opts.draft_tree != 0 && opts.parallel != 1) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft-tree runs with --parallel 1 (each branch of the tree takes "
                                                 "a sequence of the context)");
    }
    if (opts.draft_tree != 0 && opts.kv_split) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft-tree needs the one KV pool (--kv-unified=on): its branches "
                                                 "share the live sequence's cells");
    }
    if (opts.draft_tree_branches != DaemonOptions::kDefaultTreeBranches && opts.draft_tree == 0) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft-tree-branches only applies with --draft-tree");
    }
    if (opts.draft_block_size != 0 && !opts.speculative()) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft-block-size only applies with --draft, --draft-oracle or --lookup");
    }
    if (opts.lookup_min != kDefaultLookupMin && opts.lookup == DaemonOptions::Lookup::kOff) {
        throw ProtocolError(ErrorCode::kBadFlag, "--lookup-min only applies with --lookup=opt-in or on");
    }
    if (opts.one_channel && opts.stream_fd >= 0) {
        throw ProtocolError(ErrorCode::kBadFlag, "--channel=stdout carries the stream on stdout; drop --stream-fd");
    }
    if (opts.deterministic && opts.parallel > 1 && !opts.kv_split) {
        // In the shared pool a sequence's cells sit wherever there is room, so attention
        // could visit them in another order than a solo run: one stream per sequence.
        throw ProtocolError(ErrorCode::kBadFlag, "--deterministic=on with --parallel above 1 needs --kv-unified=off "
                                                 "(one KV stream per sequence, its cells in solo order)");
    }
    if (opts.n_threads == 0) {
        opts.n_threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    }
    return opts;
}

}  // namespace lucerna
