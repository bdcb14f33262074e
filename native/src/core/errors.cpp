#include "core/errors.h"

namespace lucerna {

const char * error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::kBadFlag: return "bad_flag";
        case ErrorCode::kModelNotFound: return "model_not_found";
        case ErrorCode::kWrongArch: return "wrong_arch";
        case ErrorCode::kLoadFailed: return "load_failed";
        case ErrorCode::kContextFailed: return "context_failed";
        case ErrorCode::kUnknownCommand: return "unknown_command";
        case ErrorCode::kBadArgs: return "bad_args";
        case ErrorCode::kBadTokenFile: return "bad_token_file";
        case ErrorCode::kBadTextFile: return "bad_text_file";
        case ErrorCode::kEmptyPrompt: return "empty_prompt";
        case ErrorCode::kBadToken: return "bad_token";
        case ErrorCode::kContextOverflow: return "context_overflow";
        case ErrorCode::kNoStreamFd: return "no_stream_fd";
        case ErrorCode::kDecodeFailed: return "decode_failed";
        case ErrorCode::kIoFailed: return "io_failed";
    }
    return "internal";
}

int startup_exit_code(ErrorCode code) {
    switch (code) {
        case ErrorCode::kBadFlag: return 2;
        case ErrorCode::kModelNotFound:
        case ErrorCode::kWrongArch:
        case ErrorCode::kLoadFailed: return 3;
        case ErrorCode::kContextFailed: return 4;
        default: return 1;
    }
}

}  // namespace lucerna
