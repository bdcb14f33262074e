#include "wire/errors.h"

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
        case ErrorCode::kUnsupported: return "unsupported";
        case ErrorCode::kRpcFailed: return "rpc_failed";
        case ErrorCode::kLineTooLong: return "line_too_long";
        case ErrorCode::kBadGrammar: return "bad_grammar";
        case ErrorCode::kBadSlot: return "bad_slot";
        case ErrorCode::kEmptySlot: return "empty_slot";
        case ErrorCode::kEmptySequence: return "empty_sequence";
        case ErrorCode::kSnapshotMismatch: return "snapshot_mismatch";
        case ErrorCode::kSnapshotFailed: return "snapshot_failed";
        case ErrorCode::kBadSnapshotFile: return "bad_snapshot_file";
        case ErrorCode::kParked: return "parked";
        case ErrorCode::kBadSeq: return "bad_seq";
        case ErrorCode::kSeqBusy: return "seq_busy";
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
        case ErrorCode::kRpcFailed: return 5;
        default: return 1;
    }
}

}  // namespace lucerna
