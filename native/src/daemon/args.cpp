#include "daemon/args.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <thread>

#include "wire/errors.h"

namespace lucerna {
namespace {

int64_t flag_int(const std::string & flag, const std::string & value, int64_t min, int64_t max) {
    errno = 0;
    char * end = nullptr;
    const long long parsed = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || parsed < min || parsed > max) {
        throw ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + " is not an integer in [" + std::to_string(min) +
                                                     ", " + std::to_string(max) + "]");
    }
    return parsed;
}

double flag_real(const std::string & flag, const std::string & value, double min, double max) {
    errno = 0;
    char * end = nullptr;
    const double parsed = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno == ERANGE || !(parsed >= min && parsed <= max)) {
        throw ProtocolError(ErrorCode::kBadFlag, flag + "=" + value + " is not a number in [" +
                                                     std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    return parsed;
}

// A verify step decodes the whole block in one engine micro-batch, and the recurrent
// state keeps one rollback copy per block position; 64 is far past any trained DFlash
// block (16) and keeps both bounded.
constexpr int64_t kMaxDraftBlock = 64;

}  // namespace

DaemonOptions parse_daemon_args(int argc, char ** argv) {
    DaemonOptions opts;
    bool have_model = false;
    constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
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
        const bool known = flag == "--stream-fd" || flag == "--n-ctx" || flag == "--threads" ||
                           flag == "--n-gpu-layers" || flag == "--seed" || flag == "--chunk" ||
                           flag == "--slots" || flag == "--max-line" || flag == "--draft" ||
                           flag == "--draft-block-size" || flag == "--draft-oracle" ||
                           flag == "--oracle-accept" || flag == "--flash-attn" || flag == "--kv-type" ||
                           flag == "--parallel" ||
                           is_placement_flag(flag);
        if (!known) {
            throw ProtocolError(ErrorCode::kBadFlag,
                                "unknown flag " + flag +
                                    "; flags are --stream-fd, --n-ctx, --threads, --n-gpu-layers, --seed, --chunk, "
                                    "--slots, --max-line, --draft, --draft-block-size, --draft-oracle, "
                                    "--oracle-accept, --flash-attn, --kv-type, --parallel and the placement flags");
        }
        if (eq == std::string::npos) {
            if (i + 1 >= argc) {
                throw ProtocolError(ErrorCode::kBadFlag, flag + " needs a value");
            }
            value = argv[++i];
        }
        if (flag == "--stream-fd") {
            // 0, 1 and 2 are the command and protocol channels and the log.
            opts.stream_fd = static_cast<int>(flag_int(flag, value, 3, kI32Max));
            if (::fcntl(opts.stream_fd, F_GETFD) < 0) {
                throw ProtocolError(ErrorCode::kBadFlag, "--stream-fd=" + value + " is not an open file descriptor");
            }
        } else if (flag == "--n-ctx") {
            opts.n_ctx = static_cast<int32_t>(flag_int(flag, value, 1, kI32Max));
        } else if (flag == "--chunk") {
            opts.chunk = static_cast<int32_t>(flag_int(flag, value, 1, kI32Max));
        } else if (flag == "--parallel") {
            opts.parallel = static_cast<int32_t>(flag_int(flag, value, 1, DaemonOptions::kMaxParallel));
        } else if (flag == "--slots") {
            opts.n_slots = static_cast<int32_t>(flag_int(flag, value, 0, 1 << 20));
        } else if (flag == "--max-line") {
            // A floor that every valid command fits, so a typo cannot lock the client out.
            opts.max_line = flag_int(flag, value, 64, int64_t{1} << 32);
        } else if (flag == "--threads") {
            opts.n_threads = static_cast<int32_t>(flag_int(flag, value, 1, 1024));
        } else if (is_placement_flag(flag)) {
            parse_placement_flag(flag, value, opts.placement);
        } else if (flag == "--draft") {
            if (value.empty()) {
                throw ProtocolError(ErrorCode::kBadFlag, "--draft needs a path to a DFlash draft GGUF");
            }
            opts.draft_path = value;
        } else if (flag == "--draft-block-size") {
            // 2: the smallest block that proposes anything.
            opts.draft_block_size = static_cast<int32_t>(flag_int(flag, value, 2, kMaxDraftBlock));
        } else if (flag == "--draft-oracle") {
            if (value.empty()) {
                throw ProtocolError(ErrorCode::kBadFlag, "--draft-oracle needs a path to a token file");
            }
            opts.oracle_path = value;
        } else if (flag == "--oracle-accept") {
            opts.oracle_accept = flag_real(flag, value, 1.0, static_cast<double>(kMaxDraftBlock));
        } else if (flag == "--flash-attn") {
            if (value != "auto" && value != "on" && value != "off") {
                throw ProtocolError(ErrorCode::kBadFlag, "--flash-attn=" + value + " must be auto, on or off");
            }
            opts.flash_attn = value == "auto" ? -1 : value == "on" ? 1 : 0;
        } else if (flag == "--kv-type") {
            if (value != "f16" && value != "f32" && value != "bf16" && value != "q8_0") {
                throw ProtocolError(ErrorCode::kBadFlag, "--kv-type=" + value + " must be f16, f32, bf16 or q8_0");
            }
            opts.kv_type = value;
        } else if (flag == "--n-gpu-layers") {
            opts.n_gpu_layers = static_cast<int32_t>(flag_int(flag, value, -1, kI32Max));
        } else {
            opts.seed = static_cast<uint32_t>(flag_int(flag, value, 0, std::numeric_limits<uint32_t>::max()));
        }
    }
    if (!have_model) {
        throw ProtocolError(ErrorCode::kBadFlag, "missing model path; usage: " + std::string(argv[0]) +
                                                     " <model.gguf> [--stream-fd=N] [--n-ctx=N] [--threads=N] "
                                                     "[--n-gpu-layers=N] [--seed=N]");
    }
    if (opts.oracle_accept != 0.0 && opts.oracle_path.empty()) {
        throw ProtocolError(ErrorCode::kBadFlag, "--oracle-accept only applies with --draft-oracle");
    }
    if (opts.draft_block_size != 0 && !opts.speculative()) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft-block-size only applies with --draft or --draft-oracle");
    }
    if (opts.n_threads == 0) {
        opts.n_threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    }
    return opts;
}

}  // namespace lucerna
